"""Ensemble annotation: sources -> annotator prompts -> backends -> parse -> aggregate -> merge -> split."""
