"""The moshi front-end's recipe (KAME's fine-tuning): two-channel shards (data.py) and
`tandem train moshi` (train.py)."""
