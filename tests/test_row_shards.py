"""`RowShards`, how TRL's processes split a scoring pass: each scores its share of the rows
(the last share padded with copies of the last row), and the gathered shares are the whole
batch's, in order, whatever the batch size against the process count."""

from __future__ import annotations

import threading

import pytest
import torch

from creditbench.harness.services.engines import engine_batch
from creditbench.integrations.trl_services import RowShards


class Processes:
    """``count`` processes simulated by threads: ``gather`` waits for every thread's tensor
    and concatenates them in process order, as ``accelerator.gather`` does."""

    def __init__(self, count: int) -> None:
        self.count, self.parts = count, [None] * count
        self.barrier = threading.Barrier(count, timeout=30)  # a share never gathered fails

    def gather_for(self, index: int):
        def gather(tensor: torch.Tensor) -> torch.Tensor:
            self.parts[index] = tensor
            self.barrier.wait()
            whole = torch.cat(self.parts)  # type: ignore[arg-type]
            self.barrier.wait()  # every thread has read the parts before any reuses them
            return whole

        return gather


@pytest.mark.parametrize(("size", "count"), [(8, 2), (8, 3), (2, 3), (5, 5)])
def test_each_process_scores_its_share_and_every_process_gets_the_whole(size, count):
    width = 4
    ids = torch.arange(size * width).reshape(size, width)
    batch = engine_batch(torch.zeros(size), torch.ones(size, width), torch.zeros(size).long(),
                         response_ids=ids)  # fmt: skip
    prompts = [f"prompt {i}" for i in range(size)]
    processes = Processes(count)
    seen: list[list[int]] = [[] for _ in range(count)]
    results: list = [None] * count

    def score(rows, their_prompts):
        """Stands for a forward pass: a row's 'log-probs' are its ids plus its prompt's number."""
        number = torch.tensor([float(p.split()[1]) for p in their_prompts])
        return {"logprobs": rows.response_ids.float() + number[:, None], "rows": rows.response_ids}

    def process(index: int) -> None:
        shards = RowShards(index, count, processes.gather_for(index))

        def counted(rows, their_prompts):
            seen[index].append(rows.size)
            return score(rows, their_prompts)

        results[index] = shards.run(batch, prompts, counted)

    threads = [threading.Thread(target=process, args=(k,), daemon=True) for k in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    whole = score(batch, prompts)
    share = -(-size // count)
    for index in range(count):
        assert seen[index] == [share]  # one pass over its share, never the whole batch
        assert torch.equal(results[index]["logprobs"], whole["logprobs"])
        assert torch.equal(results[index]["rows"], ids)


def test_one_process_scores_the_whole_batch_once():
    batch = engine_batch(torch.zeros(3), torch.ones(3, 2), torch.zeros(3).long())
    calls = []
    out = RowShards().run(batch, None, lambda rows, prompts: calls.append(rows) or torch.ones(3, 2))
    assert calls == [batch] and torch.equal(out, torch.ones(3, 2))
