"""Stand-in of vllm/v1/worker/kv_connector_model_runner_mixin.py at vLLM 00f4240e and, with
use_v2_model_runner, of ActiveKVConnector in vllm/v1/worker/gpu/kv_connector.py (same commit;
see ../../../README.md): the connector's life cycle around one step of a worker's model
runner. vLLM keeps the worker's connector in a process-global (get_kv_transfer_group()); this
stand-in is handed it, so that a test can hold several workers in one process.

  handle_preemptions(metadata)                  # V2 only
  bind_connector_metadata(metadata)
  start_load_kv(get_forward_context())          # before the forward if has_sync_kv_loads
  ... forward: per attention layer wait_for_layer_load(name), attention, save_kv_layer(...)
  finish_forward()                              # V2 only
  start_load_kv(get_forward_context())          # after the forward otherwise
  wait_for_save()                               # every step, steps without a forward too
  get_transfer_results(finished_req_ids), get_block_ids_with_load_errors(),
  get_kv_connector_stats(), get_kv_connector_kv_cache_events(), build_connector_worker_meta()
  clear_connector_metadata()

Registration (what the runner does once): register_kv_caches(kv_caches), then
set_host_xfer_buffer_ops(copy_kv_blocks).
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
                    connector, scheduler_output, vllm_config) as kv_connector_output:
            pass
        return ModelRunnerOutput.with_kv_conn_output_only(kv_connector_output)

    @staticmethod
    @contextmanager
    def _get_kv_connector_output(connector, scheduler_output, vllm_config=None):
        v2 = bool(getattr(vllm_config, "use_v2_model_runner", False))
        output = KVConnectorOutput()
        metadata = scheduler_output.kv_connector_metadata
        assert metadata is not None
        if v2:
            connector.handle_preemptions(metadata)
        connector.bind_connector_metadata(metadata)
        start_after_forward = not scheduler_output.has_sync_kv_loads
        if not start_after_forward:
            connector.start_load_kv(get_forward_context())
        try:
            yield output
        finally:
            if v2:
                connector.finish_forward()
            if start_after_forward:
                connector.start_load_kv(get_forward_context())
            connector.wait_for_save()
            results = connector.get_transfer_results(scheduler_output.finished_req_ids)
            output.finished_sending = results.finished_sending or None
            output.finished_recving = results.finished_recving or None
            output.failed_recving = results.failed_recving
            output.prefix_replay_checkpoints = results.prefix_replay_checkpoints
            output.invalid_block_ids = connector.get_block_ids_with_load_errors()
            output.kv_connector_stats = connector.get_kv_connector_stats()
            output.kv_cache_events = connector.get_kv_connector_kv_cache_events()
            output.kv_connector_worker_meta = connector.build_connector_worker_meta()
            connector.clear_connector_metadata()
