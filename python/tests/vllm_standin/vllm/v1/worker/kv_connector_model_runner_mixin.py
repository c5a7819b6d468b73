"""Stand-in of vllm/v1/worker/kv_connector_model_runner_mixin.py (see ../../../README.md): the
connector's life cycle around one step of a worker's model runner. vLLM keeps the worker's
connector in a process-global (get_kv_transfer_group()); this stand-in is handed it, so that a
test can hold several workers in one process.

  bind_connector_metadata(scheduler_output.kv_connector_metadata)
  start_load_kv(get_forward_context())          # before the forward
  ... forward: per attention layer wait_for_layer_load(name), attention, save_kv_layer(...)
  wait_for_save()                               # not in a step without a forward
  get_finished(scheduler_output.finished_req_ids), get_block_ids_with_load_errors()
  clear_connector_metadata()
"""

from contextlib import contextmanager

from vllm.forward_context import get_forward_context, set_forward_context
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput


class KVConnectorModelRunnerMixin:
    @staticmethod
    def kv_connector_no_forward(connector, scheduler_output, vllm_config) -> ModelRunnerOutput:
        # KV send/recv even if no work to do.
        with set_forward_context(None, vllm_config), \
                KVConnectorModelRunnerMixin._get_kv_connector_output(
                    connector, scheduler_output, wait_for_save=False) as kv_connector_output:
            pass
        return ModelRunnerOutput(req_ids=[], sampled_token_ids=[],
                                 kv_connector_output=kv_connector_output)

    @staticmethod
    @contextmanager
    def _get_kv_connector_output(connector, scheduler_output, wait_for_save: bool = True):
        output = KVConnectorOutput()
        assert scheduler_output.kv_connector_metadata is not None
        connector.bind_connector_metadata(scheduler_output.kv_connector_metadata)
        # Background KV cache transfers happen here.
        connector.start_load_kv(get_forward_context())
        try:
            yield output
        finally:
            if wait_for_save:
                connector.wait_for_save()
            output.finished_sending, output.finished_recving = (
                connector.get_finished(scheduler_output.finished_req_ids))
            output.invalid_block_ids = connector.get_block_ids_with_load_errors()
            connector.clear_connector_metadata()
