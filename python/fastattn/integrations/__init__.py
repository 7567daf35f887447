"""Integrations of fastattn with other libraries; each is imported on its own and needs its library.

    import fastattn.integrations.transformers
    fastattn.integrations.transformers.register()   # attn_implementation="fastattn"
"""
