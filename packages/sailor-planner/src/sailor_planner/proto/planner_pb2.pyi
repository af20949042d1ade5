from sailor_sim.proto import estimate_pb2 as _estimate_pb2
from sailor_sim.proto import job_pb2 as _job_pb2
from sailor_sim.proto import plan_pb2 as _plan_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Objective(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OBJECTIVE_UNSPECIFIED: _ClassVar[Objective]
    OBJECTIVE_THROUGHPUT: _ClassVar[Objective]
    OBJECTIVE_COST: _ClassVar[Objective]
OBJECTIVE_UNSPECIFIED: Objective
OBJECTIVE_THROUGHPUT: Objective
OBJECTIVE_COST: Objective

class PlanRequest(_message.Message):
    __slots__ = ("job", "inventory", "objective", "max_cost_per_iteration", "max_cost_per_hour", "min_throughput", "top_k", "allow_cross_region_data_parallel", "profile_dir", "sailor_root", "pareto_points", "search_execution_options", "profiled_only", "max_pipeline_depth")
    JOB_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_PER_ITERATION_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_PER_HOUR_FIELD_NUMBER: _ClassVar[int]
    MIN_THROUGHPUT_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    ALLOW_CROSS_REGION_DATA_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    PROFILE_DIR_FIELD_NUMBER: _ClassVar[int]
    SAILOR_ROOT_FIELD_NUMBER: _ClassVar[int]
    PARETO_POINTS_FIELD_NUMBER: _ClassVar[int]
    SEARCH_EXECUTION_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    PROFILED_ONLY_FIELD_NUMBER: _ClassVar[int]
    MAX_PIPELINE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    inventory: _job_pb2.Inventory
    objective: Objective
    max_cost_per_iteration: float
    max_cost_per_hour: float
    min_throughput: float
    top_k: int
    allow_cross_region_data_parallel: bool
    profile_dir: str
    sailor_root: str
    pareto_points: int
    search_execution_options: bool
    profiled_only: bool
    max_pipeline_depth: int
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ..., inventory: _Optional[_Union[_job_pb2.Inventory, _Mapping]] = ..., objective: _Optional[_Union[Objective, str]] = ..., max_cost_per_iteration: _Optional[float] = ..., max_cost_per_hour: _Optional[float] = ..., min_throughput: _Optional[float] = ..., top_k: _Optional[int] = ..., allow_cross_region_data_parallel: _Optional[bool] = ..., profile_dir: _Optional[str] = ..., sailor_root: _Optional[str] = ..., pareto_points: _Optional[int] = ..., search_execution_options: _Optional[bool] = ..., profiled_only: _Optional[bool] = ..., max_pipeline_depth: _Optional[int] = ...) -> None: ...

class RankedPlan(_message.Message):
    __slots__ = ("plan", "estimate", "options", "metrics")
    PLAN_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    plan: _plan_pb2.Plan
    estimate: _estimate_pb2.Estimate
    options: _job_pb2.ExecutionOptions
    metrics: PlanMetrics
    def __init__(self, plan: _Optional[_Union[_plan_pb2.Plan, _Mapping]] = ..., estimate: _Optional[_Union[_estimate_pb2.Estimate, _Mapping]] = ..., options: _Optional[_Union[_job_pb2.ExecutionOptions, _Mapping]] = ..., metrics: _Optional[_Union[PlanMetrics, _Mapping]] = ...) -> None: ...

class PlanMetrics(_message.Message):
    __slots__ = ("tokens_per_s", "tokens_per_s_per_gpu", "mfu", "provenance", "cost_by_provider")
    TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_S_PER_GPU_FIELD_NUMBER: _ClassVar[int]
    MFU_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    COST_BY_PROVIDER_FIELD_NUMBER: _ClassVar[int]
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    provenance: _containers.RepeatedCompositeFieldContainer[SourceTrust]
    cost_by_provider: _containers.RepeatedCompositeFieldContainer[ProviderCost]
    def __init__(self, tokens_per_s: _Optional[float] = ..., tokens_per_s_per_gpu: _Optional[float] = ..., mfu: _Optional[float] = ..., provenance: _Optional[_Iterable[_Union[SourceTrust, _Mapping]]] = ..., cost_by_provider: _Optional[_Iterable[_Union[ProviderCost, _Mapping]]] = ...) -> None: ...

class SourceTrust(_message.Message):
    __slots__ = ("source", "trust")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TRUST_FIELD_NUMBER: _ClassVar[int]
    source: str
    trust: str
    def __init__(self, source: _Optional[str] = ..., trust: _Optional[str] = ...) -> None: ...

class ProviderCost(_message.Message):
    __slots__ = ("provider", "region", "usd_per_hour", "spot_usd_per_hour", "missing")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    USD_PER_HOUR_FIELD_NUMBER: _ClassVar[int]
    SPOT_USD_PER_HOUR_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    provider: str
    region: str
    usd_per_hour: float
    spot_usd_per_hour: float
    missing: str
    def __init__(self, provider: _Optional[str] = ..., region: _Optional[str] = ..., usd_per_hour: _Optional[float] = ..., spot_usd_per_hour: _Optional[float] = ..., missing: _Optional[str] = ...) -> None: ...

class SearchStats(_message.Message):
    __slots__ = ("candidates_evaluated", "pruned", "infeasible", "evaluations_per_s", "rescored", "memo_hits")
    CANDIDATES_EVALUATED_FIELD_NUMBER: _ClassVar[int]
    PRUNED_FIELD_NUMBER: _ClassVar[int]
    INFEASIBLE_FIELD_NUMBER: _ClassVar[int]
    EVALUATIONS_PER_S_FIELD_NUMBER: _ClassVar[int]
    RESCORED_FIELD_NUMBER: _ClassVar[int]
    MEMO_HITS_FIELD_NUMBER: _ClassVar[int]
    candidates_evaluated: int
    pruned: int
    infeasible: int
    evaluations_per_s: float
    rescored: int
    memo_hits: int
    def __init__(self, candidates_evaluated: _Optional[int] = ..., pruned: _Optional[int] = ..., infeasible: _Optional[int] = ..., evaluations_per_s: _Optional[float] = ..., rescored: _Optional[int] = ..., memo_hits: _Optional[int] = ...) -> None: ...

class PlanResponse(_message.Message):
    __slots__ = ("plans", "search_time_s", "partial", "stats", "pareto")
    PLANS_FIELD_NUMBER: _ClassVar[int]
    SEARCH_TIME_S_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    PARETO_FIELD_NUMBER: _ClassVar[int]
    plans: _containers.RepeatedCompositeFieldContainer[RankedPlan]
    search_time_s: float
    partial: bool
    stats: SearchStats
    pareto: _containers.RepeatedCompositeFieldContainer[RankedPlan]
    def __init__(self, plans: _Optional[_Iterable[_Union[RankedPlan, _Mapping]]] = ..., search_time_s: _Optional[float] = ..., partial: _Optional[bool] = ..., stats: _Optional[_Union[SearchStats, _Mapping]] = ..., pareto: _Optional[_Iterable[_Union[RankedPlan, _Mapping]]] = ...) -> None: ...

class ReplanRequest(_message.Message):
    __slots__ = ("request", "previous_plan")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_PLAN_FIELD_NUMBER: _ClassVar[int]
    request: PlanRequest
    previous_plan: _plan_pb2.Plan
    def __init__(self, request: _Optional[_Union[PlanRequest, _Mapping]] = ..., previous_plan: _Optional[_Union[_plan_pb2.Plan, _Mapping]] = ...) -> None: ...

class SimulateRequest(_message.Message):
    __slots__ = ("job", "plan", "profile_dir", "sailor_root")
    JOB_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    PROFILE_DIR_FIELD_NUMBER: _ClassVar[int]
    SAILOR_ROOT_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    plan: _plan_pb2.Plan
    profile_dir: str
    sailor_root: str
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ..., plan: _Optional[_Union[_plan_pb2.Plan, _Mapping]] = ..., profile_dir: _Optional[str] = ..., sailor_root: _Optional[str] = ...) -> None: ...

class SimulateResponse(_message.Message):
    __slots__ = ("estimate",)
    ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    estimate: _estimate_pb2.Estimate
    def __init__(self, estimate: _Optional[_Union[_estimate_pb2.Estimate, _Mapping]] = ...) -> None: ...

class TraceRow(_message.Message):
    __slots__ = ("timestamp_s", "zone", "gpu_type", "available", "price", "preempted")
    TIMESTAMP_S_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    PRICE_FIELD_NUMBER: _ClassVar[int]
    PREEMPTED_FIELD_NUMBER: _ClassVar[int]
    timestamp_s: float
    zone: str
    gpu_type: str
    available: int
    price: float
    preempted: int
    def __init__(self, timestamp_s: _Optional[float] = ..., zone: _Optional[str] = ..., gpu_type: _Optional[str] = ..., available: _Optional[int] = ..., price: _Optional[float] = ..., preempted: _Optional[int] = ...) -> None: ...

class ReplayRequest(_message.Message):
    __slots__ = ("job", "trace", "objective", "min_throughput", "max_cost_per_iteration", "policies", "hold_last_s", "profile_dir", "sailor_root", "max_cost_per_hour", "reconfig", "started")
    JOB_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    MIN_THROUGHPUT_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_PER_ITERATION_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    HOLD_LAST_S_FIELD_NUMBER: _ClassVar[int]
    PROFILE_DIR_FIELD_NUMBER: _ClassVar[int]
    SAILOR_ROOT_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_PER_HOUR_FIELD_NUMBER: _ClassVar[int]
    RECONFIG_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    trace: _containers.RepeatedCompositeFieldContainer[TraceRow]
    objective: Objective
    min_throughput: float
    max_cost_per_iteration: float
    policies: _containers.RepeatedScalarFieldContainer[str]
    hold_last_s: float
    profile_dir: str
    sailor_root: str
    max_cost_per_hour: float
    reconfig: ReconfigParams
    started: bool
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ..., trace: _Optional[_Iterable[_Union[TraceRow, _Mapping]]] = ..., objective: _Optional[_Union[Objective, str]] = ..., min_throughput: _Optional[float] = ..., max_cost_per_iteration: _Optional[float] = ..., policies: _Optional[_Iterable[str]] = ..., hold_last_s: _Optional[float] = ..., profile_dir: _Optional[str] = ..., sailor_root: _Optional[str] = ..., max_cost_per_hour: _Optional[float] = ..., reconfig: _Optional[_Union[ReconfigParams, _Mapping]] = ..., started: _Optional[bool] = ...) -> None: ...

class ReconfigParams(_message.Message):
    __slots__ = ("detect_s", "debounce_s", "place_stop_s", "restart_s", "restore_bytes_per_s", "save_bytes_per_s", "checkpoint_interval_s", "plan_s", "provision_s", "provision_stall_s")
    DETECT_S_FIELD_NUMBER: _ClassVar[int]
    DEBOUNCE_S_FIELD_NUMBER: _ClassVar[int]
    PLACE_STOP_S_FIELD_NUMBER: _ClassVar[int]
    RESTART_S_FIELD_NUMBER: _ClassVar[int]
    RESTORE_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    SAVE_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    PLAN_S_FIELD_NUMBER: _ClassVar[int]
    PROVISION_S_FIELD_NUMBER: _ClassVar[int]
    PROVISION_STALL_S_FIELD_NUMBER: _ClassVar[int]
    detect_s: float
    debounce_s: float
    place_stop_s: float
    restart_s: float
    restore_bytes_per_s: float
    save_bytes_per_s: float
    checkpoint_interval_s: float
    plan_s: float
    provision_s: float
    provision_stall_s: float
    def __init__(self, detect_s: _Optional[float] = ..., debounce_s: _Optional[float] = ..., place_stop_s: _Optional[float] = ..., restart_s: _Optional[float] = ..., restore_bytes_per_s: _Optional[float] = ..., save_bytes_per_s: _Optional[float] = ..., checkpoint_interval_s: _Optional[float] = ..., plan_s: _Optional[float] = ..., provision_s: _Optional[float] = ..., provision_stall_s: _Optional[float] = ...) -> None: ...

class ReplayStep(_message.Message):
    __slots__ = ("policy", "index", "start_s", "duration_s", "available_gpus", "gpus_used", "samples_per_s", "usd_per_hour", "replanned", "reconfigured", "reconfigure_s", "lost_samples", "samples", "usd", "plan")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    START_S_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_GPUS_FIELD_NUMBER: _ClassVar[int]
    GPUS_USED_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_S_FIELD_NUMBER: _ClassVar[int]
    USD_PER_HOUR_FIELD_NUMBER: _ClassVar[int]
    REPLANNED_FIELD_NUMBER: _ClassVar[int]
    RECONFIGURED_FIELD_NUMBER: _ClassVar[int]
    RECONFIGURE_S_FIELD_NUMBER: _ClassVar[int]
    LOST_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    USD_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    policy: str
    index: int
    start_s: float
    duration_s: float
    available_gpus: int
    gpus_used: int
    samples_per_s: float
    usd_per_hour: float
    replanned: bool
    reconfigured: bool
    reconfigure_s: float
    lost_samples: float
    samples: float
    usd: float
    plan: str
    def __init__(self, policy: _Optional[str] = ..., index: _Optional[int] = ..., start_s: _Optional[float] = ..., duration_s: _Optional[float] = ..., available_gpus: _Optional[int] = ..., gpus_used: _Optional[int] = ..., samples_per_s: _Optional[float] = ..., usd_per_hour: _Optional[float] = ..., replanned: _Optional[bool] = ..., reconfigured: _Optional[bool] = ..., reconfigure_s: _Optional[float] = ..., lost_samples: _Optional[float] = ..., samples: _Optional[float] = ..., usd: _Optional[float] = ..., plan: _Optional[str] = ...) -> None: ...

class ReplaySummary(_message.Message):
    __slots__ = ("policy", "samples", "tokens", "usd", "usd_per_million_tokens", "mean_samples_per_s", "gpu_hours", "replans", "reconfigurations", "reconfigure_s", "lost_samples", "checkpoint_s")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    USD_FIELD_NUMBER: _ClassVar[int]
    USD_PER_MILLION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MEAN_SAMPLES_PER_S_FIELD_NUMBER: _ClassVar[int]
    GPU_HOURS_FIELD_NUMBER: _ClassVar[int]
    REPLANS_FIELD_NUMBER: _ClassVar[int]
    RECONFIGURATIONS_FIELD_NUMBER: _ClassVar[int]
    RECONFIGURE_S_FIELD_NUMBER: _ClassVar[int]
    LOST_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_S_FIELD_NUMBER: _ClassVar[int]
    policy: str
    samples: float
    tokens: float
    usd: float
    usd_per_million_tokens: float
    mean_samples_per_s: float
    gpu_hours: float
    replans: int
    reconfigurations: int
    reconfigure_s: float
    lost_samples: float
    checkpoint_s: float
    def __init__(self, policy: _Optional[str] = ..., samples: _Optional[float] = ..., tokens: _Optional[float] = ..., usd: _Optional[float] = ..., usd_per_million_tokens: _Optional[float] = ..., mean_samples_per_s: _Optional[float] = ..., gpu_hours: _Optional[float] = ..., replans: _Optional[int] = ..., reconfigurations: _Optional[int] = ..., reconfigure_s: _Optional[float] = ..., lost_samples: _Optional[float] = ..., checkpoint_s: _Optional[float] = ...) -> None: ...

class ReplayEvent(_message.Message):
    __slots__ = ("step", "summary")
    STEP_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    step: ReplayStep
    summary: ReplaySummary
    def __init__(self, step: _Optional[_Union[ReplayStep, _Mapping]] = ..., summary: _Optional[_Union[ReplaySummary, _Mapping]] = ...) -> None: ...
