# The two ticks. Each publishes one small message; the functions treat a tick as "look now",
# so a lost or duplicated tick costs nothing but one interval.

resource "google_cloud_scheduler_job" "upstream_tick" {
  project     = var.project_id
  region      = var.region
  name        = "${var.name_prefix}-upstream-tick"
  description = "Poll the watched Hugging Face repos (upstream_poll)."
  schedule    = var.upstream_poll_schedule
  time_zone   = var.scheduler_time_zone

  pubsub_target {
    topic_name = google_pubsub_topic.upstream_tick.id
    data       = base64encode(jsonencode({ tick = "upstream" }))
    attributes = { source = "cloud-scheduler" }
  }

  depends_on = [google_project_service.apis]
}

resource "google_cloud_scheduler_job" "reconcile_tick" {
  project     = var.project_id
  region      = var.region
  name        = "${var.name_prefix}-reconcile-tick"
  description = "Reconcile ledgers, executions and cluster objects (reconcile)."
  schedule    = var.reconcile_schedule
  time_zone   = var.scheduler_time_zone

  pubsub_target {
    topic_name = google_pubsub_topic.reconcile_tick.id
    data       = base64encode(jsonencode({ tick = "reconcile" }))
    attributes = { source = "cloud-scheduler" }
  }

  depends_on = [google_project_service.apis]
}
