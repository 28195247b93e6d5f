"""Training, for every front-end: the shared synthetic dialogues (synth.py) and KAME-recipe oracle
simulator (oracles.py), and one package per front-end's recipe (compact/, moshi/). Training imports
the run-time modules it needs (a front-end's model, tokenizer, decoding; the oracle stream); run-time
code never imports training."""
