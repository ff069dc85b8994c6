"""Exports of a trained model to the runtimes people deploy: CTranslate2, Argos Translate
packages, and safetensors weights with a JSON config."""
