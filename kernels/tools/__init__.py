"""Commands for the people who keep the course: ``python -m kernels.tools.record`` (measure every
lesson on a GPU into results/) and ``python -m kernels.tools.exercises`` (exercises/ from solutions/)."""
