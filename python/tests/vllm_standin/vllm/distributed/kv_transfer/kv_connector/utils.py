"""Stand-in of KVOutputAggregator (vllm/distributed/kv_transfer/kv_connector/utils.py): the
executor merges its workers' outputs; a request counts as finished sending once every worker
has reported it, in this step or an earlier one."""

from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput


class KVOutputAggregator:
    def __init__(self, expected_finished_count: int) -> None:
        self._expected = expected_finished_count
        self._send_remaining: dict[str, int] = {}
        self._recv_remaining: dict[str, int] = {}

    def _count(self, remaining: dict, ids, done: set) -> None:
        for req_id in ids or ():
            left = remaining.get(req_id, self._expected) - 1
            if left == 0:
                remaining.pop(req_id, None)
                done.add(req_id)
            else:
                remaining[req_id] = left

    def aggregate(self, outputs: list[ModelRunnerOutput]) -> ModelRunnerOutput:
        sending: set[str] = set()
        recving: set[str] = set()
        invalid: set[int] = set()
        for out in outputs:
            kv = out.kv_connector_output
            if kv is None:
                continue
            self._count(self._send_remaining, kv.finished_sending, sending)
            self._count(self._recv_remaining, kv.finished_recving, recving)
            invalid |= kv.invalid_block_ids or set()
        first = outputs[0]
        return ModelRunnerOutput(first.req_ids, first.sampled_token_ids, KVConnectorOutput(
            finished_sending=sending or None, finished_recving=recving or None,
            invalid_block_ids=invalid))
