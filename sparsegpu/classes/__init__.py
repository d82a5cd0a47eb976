"""The scipy classes: sparsegpu's CSR, CSC and BSR matrices and what makes them.

The top floor of the library. ``_matrix`` holds the scipy subclasses (argument handling,
the product hooks), ``_mirrors`` the mirror state each matrix holds and its invalidation
(writes by compiled code included), ``_class_loss`` the warning when a scipy left operand
makes scipy's class, ``_construct`` scipy's construction functions returning sparsegpu
classes (and ``sg.as_sparsegpu``), ``_products`` the product functions (``sg.matvec``,
``sg.spgemm``, ``sg.galerkin_product``, ``sg.explain``) and ``_reorder`` ``sg.reorder``. Everything
here calls down into :mod:`sparsegpu.engine`; nothing below imports it.
"""
