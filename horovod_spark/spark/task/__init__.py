"""The task and rank side every Spark launch shares: the body of a rank's task (``body``: register,
place, start the rank, stream its output, report), its line from the driver (``control``), the
rank's topology (``placement``), the rank process (``rank_process``, ``rank_main``), its private
directory (``run_dir``) and its GPU (``gpus``)."""
