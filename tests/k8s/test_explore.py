"""The exploring test of RocketCluster spec changes (:mod:`tests.k8s.explore`).

``make test`` runs one short sequence (``EXPLORE_STEPS``, default 4 rules after the create);
``make explore`` a long one (``EXPLORE_STEPS`` rules per sequence, ``EXPLORE_EXAMPLES`` sequences).
The seed (``EXPLORE_SEED``, random by default) is printed first: run again with it to replay.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

from tests.k8s import explore, harness


def test_explore_spec_changes(api: Any, operator: Any, namespace: str) -> None:
    steps = int(os.environ.get("EXPLORE_STEPS", "4"))
    examples = int(os.environ.get("EXPLORE_EXAMPLES", "1"))
    seed = int(os.environ.get("EXPLORE_SEED") or random.randrange(2**32))
    explore.say(f"\nexplore: EXPLORE_SEED={seed} EXPLORE_STEPS={steps} EXPLORE_EXAMPLES={examples}")
    harness.install_spark_crds(api)
    started = time.monotonic()
    with explore.OperatorLog.installed() as log:
        env = explore.Env(api=api, namespace=namespace, log=log)
        try:
            explore.run(env, steps=steps, seed=seed, examples=examples)
        except BaseException:
            explore.say(f"explore: FAILED after {env.steps} steps; replay with EXPLORE_SEED={seed} "
                  f"EXPLORE_STEPS={steps} EXPLORE_EXAMPLES={examples}")
            raise
    explore.say(f"explore: {env.steps} steps in {time.monotonic() - started:.0f} s, seed {seed}")
    assert env.steps >= 1
