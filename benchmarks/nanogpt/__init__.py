"""nanoGPT (karpathy/nanoGPT) as the reference, in one place: every comparison with it imports this.

- ``checkout``: a checkout named by ``NANOGPT_DIR`` (its code is never part of this repository): its
  ``model.py`` loaded, its GPT with GPT-2's weights or a checkpoint's, its data files written from a
  text file, its ``train.py`` output read, and the flags of its README's "baby" CPU run;
- ``handwritten``: a minimal GPT after nanoGPT's model.py, the reference where there is no checkout;
- ``whole_run``: the suite's ``nanogpt`` section, nanoGPT's ``train.py`` against ``attnlab-train``;
- ``val_loss``: a nanoGPT checkpoint scored on the whole validation split as attnlab scores its own
  (experiments/nanogpt_baby).

The training-step section (``benchmarks.train_step``) and the GPU benchmark (``benchmarks.gpu_step``,
``benchmarks.gpu_recipe``) take their nanoGPT contenders from here.
"""
