"""Common planner workflows from Python (also run by the test suite, so it stays true).

    python examples/workflows.py
"""

import numpy as np

import planner
from planner.cost.memory import activation_bytes_per_layer

# 1. Rank every layout of Llama-3.1-405B on 512 H100s: a pandas DataFrame, best first.
df = planner.search(model="405b", gpus=512)
print(f"{df.attrs['considered']:,} layouts considered, {len(df):,} fit; best:")
print(df[["tp", "cp", "pp", "dp", "micro_batch", "recompute", "zero_stage", "memory_gib", "step_time_s", "mfu"]].head(3))

# 2. One layout in full: memory and time by part (in Jupyter, `r` renders as an HTML breakdown).
r = planner.evaluate(model="405b", gpus=512, tp=8, pp=16, dp=4)
print(r)

# 3. The cost functions take numpy arrays: activation memory per layer for four TP degrees in one call.
m = planner.load_model("405b")
act = activation_bytes_per_layer(m, seq_len=8192, micro_batch=1, tp=np.array([1, 2, 4, 8]), sp=True, recompute=1)
print("activations per layer (GiB) at TP 1/2/4/8:", np.round(act / 2**30, 2))

# 4. Where scaling stops paying, and what 15T tokens cost, per GPU count.
s = planner.sweep("70b", "256..2048", tokens=15e12)
print(s[["gpus", "tp", "cp", "pp", "dp", "tokens_per_s", "mfu", "scaling_efficiency", "time_to_train_days", "cost_usd"]])

# 5. Which cluster to rent: the same job on several profiles, cheapest first.
c = planner.compare_hardware("70b", 512, ["h100-sxm", "h200-sxm", "b200"], tokens=15e12, sort="cost")
print(c[["hardware", "tp", "pp", "dp", "mfu", "time_to_train_days", "cost_usd"]])

# 6. How close is the planner to reality? Re-predict the bundled published runs.
errors = [abs(planner.predict(run).throughput_error) for run in planner.load_runs()]
print(f"median |error| over {len(errors)} published runs: {np.median(errors):.1%}")

# 7. A readable table in a notebook: planner.style(df) returns a StyledTable (HTML in Jupyter, text elsewhere).
html = planner.style(df.head(5)).to_html()
print(f"styled HTML table: {len(html):,} characters")

# 8. Long context: 128K-token sequences need context parallelism; compare the best layout with and without it.
long = dict(seq_len=131072, global_batch_tokens=2**24)
with_cp = planner.search("405b", 16384, **long).iloc[0]
no_cp = planner.search("405b", 16384, cp=1, **long).iloc[0]
print(f"405B at 128K on 16,384 GPUs: TP{with_cp.tp} CP{with_cp.cp} PP{with_cp.pp} DP{with_cp.dp} MFU {with_cp.mfu:.1%}; "
      f"without CP: TP{no_cp.tp} PP{no_cp.pp} DP{no_cp.dp} MFU {no_cp.mfu:.1%}")
