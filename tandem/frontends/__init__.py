"""Front-ends: each module registers itself with `tandem.frontend.register`."""
