"""The judge-running plumbing every meta-evaluation shares (correlation, spans, perturbation, distillation).

suite.py           the suite config: which sets, aspects and coefficients (`AspectSpec`, `DatasetSpec`)
datasets.py        the human-judgment sets in one shape (`MetaItem`, `MetaDataset`) and their loaders
qags.py            QAGS human scores from the raw crowd file
judgment.py        what a judge under meta-evaluation is (`MetaJudge`, `Judgment`)
judges.py          the registry of judge kinds (`--judge KIND:VALUE`)
judge_files.py     judges read from files (scores, distilled adapters run in this process)
prompted_judge.py  a prompted LLM judge through the backend layer
baselines.py       classic reference-based metrics (ROUGE, BLEU, chrF)
sampling.py        repeated sampling (`--samples N`)
store.py           judgments on disk, resumable
"""
