"""Pretrained models of other toolkits (Hugging Face's MarianMTModel, the form OPUS-MT is
published in on the Hub, and Marian's own format, its zip releases; fairseq's Transformer
checkpoints) imported as this project's model files, which every command then takes as
it takes its own."""
