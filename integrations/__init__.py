"""spanjudge inside the tools researchers already run: an inspect_ai scorer
(`spanjudge.integrations.inspect`). Each module imports its tool only when used."""
