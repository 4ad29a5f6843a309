"""The ``r2v`` distribution's own namespace, for integrations that name things after the installed distribution.

Inspect AI names a task ``<distribution>/<task>`` from the top-level package its module is in, so the tasks that
``inspect eval r2v/textworld`` finds live here (:mod:`r2v.inspect_tasks`, registered by the ``inspect_ai`` entry
point); what they do lives in :mod:`r2v_eval.inspect_tasks`. Importing this package imports nothing else.
"""
