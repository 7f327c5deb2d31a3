"""Integrations of moejit with other frameworks, each imported on demand (importing moejit or
moejit.integrations imports none of them):

    import moejit.integrations.transformers as mj_hf
    mj_hf.register()   # experts_implementation="moejit" in Hugging Face transformers
"""

__all__ = ["transformers"]


def __getattr__(name: str):
    if name == "transformers":
        import importlib
        return importlib.import_module(".transformers", __name__)
    raise AttributeError(f"module 'moejit.integrations' has no attribute {name!r}")
