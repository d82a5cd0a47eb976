"""The engine: which backend computes a product, decided once and kept.

``_dispatch`` (``A @ x``) and ``_sparse_dispatch`` (``A @ B``) run one product with the plan
that planning (``_planning``) hands them; planning times candidates that selection
(``_select``) names from the registry (``_registry``) and the tuning store
(``_tuning_store``, with the shipped ``tuning_defaults.json``). It calls down into
:mod:`sparsegpu.backends`, :mod:`sparsegpu.measure` and :mod:`sparsegpu.device`.
"""
