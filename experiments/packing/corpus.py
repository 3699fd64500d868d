"""Why the packing study's arms can barely differ: how often a training window holds a document
boundary. From the corpus alone (no run needed): the training documents' lengths, and over every
window offset the training stream allows (the random draw's expectation), the share of windows that
hold a boundary and the share of predicted positions that have an earlier document in their window
(``document_ids`` not 0: the only predictions the document mask can change).

usage: python experiments/packing/corpus.py > experiments/packing/results/corpus.json
"""

from __future__ import annotations

import json

import torch

from attnlab.data import build_datamodule
from attnlab.schema.data import data_config
from attnlab.schema.model import model_config
from attnlab.schema.task import CausalLMTask

SEQ_LEN = 256  # the study's data.seq_len: windows of seq_len + 1 tokens


def main() -> None:
    cfg = data_config("text", packing="documents", seq_len=SEQ_LEN, val_fraction=0.1, test_fraction=0.0)
    dm = build_datamodule(cfg, needs=CausalLMTask.data_needs, seed=0, model_cfg=model_config("gpt"))
    dm.setup("fit")
    documents = {split: dm.datasets[split].stream.documents.long() for split in ("train", "val")}
    train = documents["train"]
    lengths = torch.bincount(train - train.min())
    windows = train.unfold(0, SEQ_LEN + 1, 1)  # every offset
    ids = windows[:, :-1] - windows[:, :1]  # document_ids of each window's inputs
    print(
        json.dumps(
            {
                "train_documents": len(lengths),
                "val_documents": len(torch.unique(documents["val"])),
                "train_tokens": len(train),
                "mean_document_tokens": float(lengths.float().mean()),
                "window_offsets": len(windows),
                "windows_with_a_boundary": float((windows[:, -1] != windows[:, 0]).float().mean()),
                "positions_after_a_boundary": float((ids != 0).float().mean()),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
