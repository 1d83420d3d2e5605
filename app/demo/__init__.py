"""`spanjudge demo`: the whole pipeline end to end on tiny real models, with one HTML report.

run       `run_demo`: the steps in order, each timed and recorded, servers started and stopped
steps     each step as the same stage calls a user makes (annotate, teacher, train, score, ...)
config    the demo YAML (`configs/demo/*.yaml`)
compare   the base-vs-trained rows the report shows
report    report.html and its parts
cli       the command
"""
