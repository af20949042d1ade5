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
    __slots__ = ("job", "inventory", "objective", "max_cost_per_iteration", "max_cost_per_hour", "min_throughput", "top_k", "allow_cross_region_data_parallel", "profile_dir", "sailor_root", "pareto_points")
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
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ..., inventory: _Optional[_Union[_job_pb2.Inventory, _Mapping]] = ..., objective: _Optional[_Union[Objective, str]] = ..., max_cost_per_iteration: _Optional[float] = ..., max_cost_per_hour: _Optional[float] = ..., min_throughput: _Optional[float] = ..., top_k: _Optional[int] = ..., allow_cross_region_data_parallel: _Optional[bool] = ..., profile_dir: _Optional[str] = ..., sailor_root: _Optional[str] = ..., pareto_points: _Optional[int] = ...) -> None: ...

class RankedPlan(_message.Message):
    __slots__ = ("plan", "estimate")
    PLAN_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    plan: _plan_pb2.Plan
    estimate: _estimate_pb2.Estimate
    def __init__(self, plan: _Optional[_Union[_plan_pb2.Plan, _Mapping]] = ..., estimate: _Optional[_Union[_estimate_pb2.Estimate, _Mapping]] = ...) -> None: ...

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
