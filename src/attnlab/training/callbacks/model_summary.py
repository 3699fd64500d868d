"""The model summary printed when fit starts: Lightning's rich table without its FLOPs.

Lightning counts FLOPs by running the module's ``example_input_array`` under torch's FLOP counter;
attnlab's task modules have none (their batches are dicts whose shapes the data decides), so Lightning
printed ``Total FLOPs: 0`` and a column of zeros, which reads like a measurement. The training FLOPs
that matter (forward and backward per token, PaLM's count) are ``TaskModule.batch_work``'s, which
``ThroughputLogger`` turns into ``train/mfu``.
"""

from __future__ import annotations

from typing import Any

from pytorch_lightning.callbacks import RichModelSummary
from pytorch_lightning.utilities.model_summary import get_formatted_model_size, get_human_readable_count

FLOPS_COLUMN = "FLOPs"


class ModelSummary(RichModelSummary):
    """Lightning's ``RichModelSummary`` (layers to ``max_depth``, parameter counts, size, modes), no FLOPs."""

    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int,
        **summarize_kwargs: Any,
    ) -> None:
        from rich import get_console
        from rich.table import Table

        columns = [(name, values) for name, values in summary_data if name != FLOPS_COLUMN]
        table = Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
        for i, (name, _) in enumerate(columns):
            table.add_column(name if i else " ", style="dim" if i == 0 else None, justify="left")
        for row in zip(*(values for _, values in columns)):
            table.add_row(*row)
        grid = Table.grid(expand=True)
        grid.add_column()
        frozen = total_parameters - trainable_parameters
        grid.add_row(f"[bold]Trainable params[/]: {get_human_readable_count(int(trainable_parameters))}")
        grid.add_row(f"[bold]Non-trainable params[/]: {get_human_readable_count(int(frozen))}")
        grid.add_row(f"[bold]Total params[/]: {get_human_readable_count(int(total_parameters))}")
        grid.add_row(
            f"[bold]Total estimated model params size (MB)[/]: {get_formatted_model_size(model_size)}"
        )
        grid.add_row(f"[bold]Modules in train mode[/]: {total_training_modes['train']}")
        grid.add_row(f"[bold]Modules in eval mode[/]: {total_training_modes['eval']}")
        console = get_console()
        console.print(table)
        console.print(grid)
