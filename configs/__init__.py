"""The configs shipped with spanjudge (tasks, prompts, training recipes ...): data, read with importlib.resources."""
