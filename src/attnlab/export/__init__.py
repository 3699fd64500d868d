"""Models leaving attnlab: a trained model as a Hugging Face directory that ``transformers`` loads
with its ``Auto*`` classes (``hf.write_hf``). The weight mapping is ``attnlab.models.hf``'s, read
backwards; this package writes the files (config.json, model.safetensors, the tokenizer)."""

from attnlab.export.hf import write_hf

__all__ = ["write_hf"]
