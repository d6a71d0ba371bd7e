"""Examples for dsh-actors: :mod:`examples.tools` (a small, realistic tool
module) and the batch files ``batch.json``, ``batch_openai.json`` and
``batch_anthropic.json`` that the README and the tests run with
``dsh-actors run``."""
