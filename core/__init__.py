"""The base layer: what every stage needs and that runs no model — the task catalog, the registry of
extension points, options declared once, errors, atomic files, the one JSONL store and reader, locks,
config reading, `KEY=VALUE` options, data paths, the progress protocol, provenance, shards, the "same
input" rule, typed artifacts that cross stages, Hub rows. It imports no other part of spanjudge."""

from .library_noise import quiet_harmless_library_messages

quiet_harmless_library_messages()  # before any stage imports peft (and with it bitsandbytes)
