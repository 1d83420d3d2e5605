"""spanjudge inside the tools researchers already run: an inspect_ai scorer
(`spanjudge.integrations.inspect`) and an lm-evaluation-harness `process_results`
(`spanjudge.integrations.lm_eval`). Each module imports its tool only when it is imported."""
