"""Model architectures: ModelSpec with exact per-layer accounting (dense, mixture-of-experts,
latent attention), Hugging Face config.json.
"""
