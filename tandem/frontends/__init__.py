"""Front-ends: each module registers itself with `tandem.speak.frontend.register`."""
