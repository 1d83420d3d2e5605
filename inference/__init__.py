"""The base layer: the judge's output contract, the task/aspect catalog, prompt rendering,
model backends and the `Judge`. It imports none of the other stages."""

from .library_noise import quiet_harmless_library_messages

quiet_harmless_library_messages()  # before any stage imports peft (and with it bitsandbytes)
