"""The compact front-end's recipe: data (synthetic dialogues, simulated oracles, the teacher),
training (`tandem train compact`) and evaluation (`tandem evaluate compact`)."""
