"""Publishing a run's exported checkpoint to the Hugging Face Hub (the stage after export).

- ``rlpipe.publisher.program``: the program the publish Job runs (``python3 -c <its source>``), one
  self-contained file importing only the standard library, ``huggingface_hub`` and
  ``google.cloud.storage``; it never imports rlpipe.
- ``rlpipe.publisher.card``: the model card (README.md) the control plane renders before the Job
  starts, from ``model_card.md.j2``; ``rlpipe.publisher.evaluation`` turns train_rl's evaluations
  into its table and its ``model-index`` (the Hub's evaluation results).
"""
