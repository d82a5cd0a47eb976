import time, numpy as np, cupy, scipy.sparse as sp, sparsegpu as sg
from sparsegpu.datasets import synthetic
rng = np.random.default_rng(0)
mats = {
  "stencil2d_1000": lambda: synthetic.stencil_2d(1000),
  "uniform_200k_x16": lambda: synthetic.uniform_random(200_000, 16),
  "powerlaw_500k": lambda: synthetic.power_law(500_000),
  "bcsstk13": lambda: sp.csr_matrix(__import__("scipy.io").io.mmread(sg.datasets.path("bcsstk13"))),
}
for name, build in mats.items():
    A = sg.csr_matrix(build())
    x = cupy.asarray(rng.uniform(-1, 1, A.shape[1]))
    A @ x; A @ x
    c = sg.explain(A)
    print(f"== {name}: {c.backend} level={c.level} planning_ms={c.planning_ms}")
    for m in c.measurements: print("   ", m)
