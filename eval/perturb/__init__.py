"""Perturbation benchmarks (docs/research/benchmarks.md, seeds 000-003): build once, score any judge.

    registry        the benchmark kinds' names (`BENCHMARKS`, `KINDS`, `KindName`): imports no kind
    kind            a kind's declaration (`BenchmarkKind`), `get_kind`, and `build_benchmark`
    kinds/          one module per benchmark kind: dhp, dual, attacks, prompt, each with its
                    sources, build, analyse, report and plots
    perturbations   the perturbation library; its tables are configs/perturb/perturbations.yaml
    rules           the rule-based perturbations the tables name
    llm_perturb     LLM-made perturbations through the backend layer, frozen with provenance
    build           what every kind's build shares (`BuildRequest`, `Built`, sources, `Collector`)
    benchmark       the benchmark folder: `BenchmarkManifest` (benchmark.json), items.jsonl
    judgments       a judge's scores on a benchmark (the meta-eval judgment store)
    analysis        what every kind's analysis shares, and the judge's spans vs the changed ones
    report          results.json and report.md around the kind's own tables and plots
    statistics      the pure statistics; published: the seeds' published numbers
    cli             `spanjudge perturb` (`build_folder`)
    evaluate        `evaluate_benchmark` (`meta-eval --benchmark`)

How to add a benchmark (two files, and table rows for new perturbations):
1. Write `kinds/<name>.py` ending in `KIND = kind.BenchmarkKind(name="<name>", ...)`: the datasets
   it is built from, `build(BuildRequest) -> Built` (use `build.reference_sources` or
   `expert_sources` and `build.build_perturbed_sets`), `analyse(benchmark, scored, options)`
   returning a JSON-ready dict, `report(metrics, benchmark)` returning markdown lines,
   `plots(metrics, folder)` (or `kind.no_plots`), why a cell can be undefined, how
   `--samples` aggregate, and optionally `headline(metrics)`: the one number summaries show.
2. Add one line to `BENCHMARKS` in `registry.py` ("<name>": "...kinds.<name>:KIND"). The CLI's
   `--benchmark` choices, the demo config and report, the published numbers and the manifest
   reader take the list from there, and tests/unit/test_benchmark_registry.py checks the new
   kind has every part.
New perturbations are rows of `perturbations:` in configs/perturb/perturbations.yaml, each naming
its benchmark (`perturbations.keys_of("<name>")` gives the kind its keys) and a rule of
`rules.RULES` or, for an LLM-made one, a prompt of the same key in prompts.yaml.
tests/unit/test_recipes.py adds a toy benchmark exactly so.
"""
