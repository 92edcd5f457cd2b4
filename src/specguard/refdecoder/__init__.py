"""Reference speculative decoder: a small trained DeepSeek-V4-shaped model with an MTP drafter.

Shows, on a model that really predicts text, what routing a draft module by
the wrong format costs: acceptance and tokens/s per routing policy.
Needs torch (``pip install specguard[torch]``).
"""
