"""Commands: ``python -m kernels.tools.doctor`` (the seat check, for everyone) and, for the people who keep
the course, ``python -m kernels.tools.record`` (measure every lesson on a GPU into results/) and
``python -m kernels.tools.exercises`` (exercises/ from solutions/)."""
