"""The scipy classes: sparsegpu's CSR, CSC and BSR matrices and what makes them.

The top floor of the library. ``_matrix`` holds the scipy subclasses (argument handling,
the product hooks, mirrors and their invalidation), ``_construct`` scipy's construction
functions returning them, ``_products`` the product functions (``sg.spgemm``,
``sg.galerkin_product``, ``sg.explain``) and ``_reorder`` ``sg.reorder``. Everything
here calls down into :mod:`sparsegpu.engine`; nothing below imports it.
"""
