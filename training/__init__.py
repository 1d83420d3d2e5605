"""LoRA / QLoRA supervised fine-tuning of the distilled judge (`accelerate launch train.py`)."""
