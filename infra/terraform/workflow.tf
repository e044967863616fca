# The state machine of one run (workflows/pipeline.yaml). Its identity may call `stage` and nothing
# else (run.invoker on that one service, functions.tf) besides writing its own logs. The callbacks
# it creates are sent by artifact_event, whose account has roles/workflows.invoker
# (workflows.callbacks.send).

resource "google_workflows_workflow" "pipeline" {
  project             = var.project_id
  region              = var.region
  name                = var.workflow_name
  description         = "rlpipe: convert -> train -> export for one run"
  service_account     = google_service_account.workflow.id
  call_log_level      = "LOG_ERRORS_ONLY"
  source_contents     = file("${path.module}/../../workflows/pipeline.yaml")
  deletion_protection = var.deletion_protection

  user_env_vars = {
    RLPIPE_STAGE_URL      = google_cloudfunctions2_function.fn["stage"].service_config[0].uri
    RLPIPE_STAGE_AUDIENCE = local.stage_audience # its OIDC tokens' aud, which stage verifies
  }

  depends_on = [google_project_service.apis, google_project_iam_member.project]
}
