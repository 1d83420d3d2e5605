"""Publishing to the Hugging Face Hub: a trained judge with its model card, or an annotated
dataset with its dataset card (`spanjudge publish`). The top layer: it reads what training,
annotation and meta-evaluation wrote and runs no model (except `--merged`, through export).

- `run.py` reads a training run (the adapter's typed `spanjudge.json`, config, metrics);
  `results.py` reads the meta-evaluation rows the card shows (typed `ResultRow`s);
  `dataset.py` reads an annotation folder;
- `card.py` and `dataset_card.py` build the cards' data and render the Jinja templates
  `configs/cards/model.jinja` and `configs/cards/dataset.jinja` (`markdown.py`);
- `staging.py` holds the allow-list and the checks every staged file passes (no links, nothing
  outside the folder, valid safetensors, no token, no machine-local path);
  `model_staging.py` and `dataset_staging.py` stage each kind of repo into one folder;
- `hub.py` holds the token lookup and the upload; `api.py` the `publish` function that
  `cli.py`'s command calls.
"""
