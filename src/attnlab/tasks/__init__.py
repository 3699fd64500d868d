"""Lightning task modules: causal LM, masked LM, seq2seq and classification, with their optimisers and schedules.

A task module wraps one model and the batch layout of its objective; it gets the tokenizer as an
object (nothing here imports ``attnlab.data``). The configs it is built from are in ``attnlab.schema.task``.
"""

from attnlab.tasks.base import TASK_CLASSES, TaskModule, Work, flops_per_token
from attnlab.tasks.build import build_task
from attnlab.tasks.causal_lm import CausalLMTask
from attnlab.tasks.classification import ClassificationTask
from attnlab.tasks.mlm import MaskedLMTask
from attnlab.tasks.seq2seq import Seq2SeqTask

__all__ = [
    "TASK_CLASSES",
    "CausalLMTask",
    "ClassificationTask",
    "MaskedLMTask",
    "Seq2SeqTask",
    "TaskModule",
    "Work",
    "build_task",
    "flops_per_token",
]
