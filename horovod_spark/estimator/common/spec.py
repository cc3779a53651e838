"""What the driver sends to every rank for one fit: plain values plus the framework's payload.

Framework-free and pyspark-free, because ranks import it before they import anything else.
"""
from dataclasses import dataclass, field
from typing import List, Optional


@dataclass
class TrainSpec:
    store: object
    run_id: str
    train_path: str
    val_path: Optional[str]
    train_rows: int
    val_rows: int
    feature_cols: List[str]
    label_cols: List[str]
    sample_weight_col: Optional[str]
    input_shapes: Optional[List[List[int]]]
    label_shapes: Optional[List[List[int]]]
    batch_size: int
    val_batch_size: int
    epochs: int
    start_epoch: int
    resume_path: Optional[str]
    train_steps_per_epoch: Optional[int]
    validation_steps_per_epoch: Optional[int]
    shuffle: bool
    shuffle_buffer_rows: Optional[int]
    seed: int
    backward_passes_per_step: int
    data_module: str
    use_gpu: bool
    verbose: int
    payload: bytes                 # the framework's cloudpickled model, optimizer, loss, ...
    inmemory_cache_all: bool = False   # ranks keep the row groups they read in memory (data/row_group_cache.py)
    nonfinite_loss: str = "raise"      # 'raise' | 'warn' (common/nonfinite.py)
    elastic: bool = False              # ranks run under run_elastic and commit at each epoch's end
    progress: Optional[object] = None  # elastic fits: the driver's elastic_progress.ProgressChannel
    keep_checkpoints: int = 2
    progress_interval: float = 0.5
    train_reader_options: dict = field(default_factory=dict)   # the data module's own reader options
    val_reader_options: dict = field(default_factory=dict)
    mp_start_method: Optional[str] = None   # multiprocessing's start method on the ranks
    # Whether rank 0 says use_gpu=True found no GPU (rank_device.py): not at verbose=0 when use_gpu
    # is only the default, which a CPU cluster's user never chose.
    gpu_notice: bool = True
    progress_events: bool = False      # rank 0 reports epochs even at verbose=0 (the driver tracks them)

    @property
    def columns(self) -> List[str]:
        return self.feature_cols + self.label_cols + ([self.sample_weight_col] if self.sample_weight_col else [])
