"""The application layer: the `spanjudge` command root, the demo, and `train.py`'s entry. It may
import every layer below; nothing imports it."""
