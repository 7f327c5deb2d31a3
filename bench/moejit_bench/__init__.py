"""The workshop's layer benchmark (not shipped in the wheel): `python -m moejit_bench` with
PYTHONPATH=python:bench in a checkout; see bench/README.md."""
from .layer import SHAPES, make_inputs, moejit_layer  # noqa: F401
