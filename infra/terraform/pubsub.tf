# Topics: requests (intake_message), status (one message per terminal state), the two scheduler
# ticks, and the dead-letter topic every Eventarc trigger's subscription forwards to.

resource "google_pubsub_topic" "requests" {
  #checkov:skip=CKV_GCP_83:Google-managed encryption; messages are requests, ticks and status records (no secrets). CMEK would need a KMS key ring this project does not otherwise need.
  project = var.project_id
  name    = "${var.name_prefix}-requests"

  depends_on = [google_project_service.apis]
}

resource "google_pubsub_topic" "status" {
  #checkov:skip=CKV_GCP_83:Google-managed encryption; messages are requests, ticks and status records (no secrets). CMEK would need a KMS key ring this project does not otherwise need.
  project = var.project_id
  name    = "${var.name_prefix}-status"

  depends_on = [google_project_service.apis]
}

resource "google_pubsub_topic" "upstream_tick" {
  #checkov:skip=CKV_GCP_83:Google-managed encryption; messages are requests, ticks and status records (no secrets). CMEK would need a KMS key ring this project does not otherwise need.
  project = var.project_id
  name    = "${var.name_prefix}-upstream-tick"

  depends_on = [google_project_service.apis]
}

resource "google_pubsub_topic" "reconcile_tick" {
  #checkov:skip=CKV_GCP_83:Google-managed encryption; messages are requests, ticks and status records (no secrets). CMEK would need a KMS key ring this project does not otherwise need.
  project = var.project_id
  name    = "${var.name_prefix}-reconcile-tick"

  depends_on = [google_project_service.apis]
}

resource "google_pubsub_topic" "dead_letter" {
  #checkov:skip=CKV_GCP_83:Google-managed encryption; messages are requests, ticks and status records (no secrets). CMEK would need a KMS key ring this project does not otherwise need.
  project = var.project_id
  name    = "${var.name_prefix}-dead-letter"

  depends_on = [google_project_service.apis]
}

# Where dead letters wait for a person: `gcloud pubsub subscriptions pull <name> --limit 10`.
resource "google_pubsub_subscription" "dead_letter" {
  project                    = var.project_id
  name                       = "${var.name_prefix}-dead-letter"
  topic                      = google_pubsub_topic.dead_letter.id
  ack_deadline_seconds       = 60
  message_retention_duration = "604800s"

  expiration_policy {
    ttl = ""
  }
}

# Pub/Sub forwards undeliverable messages to the dead-letter topic as its service agent.
resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  project = var.project_id
  topic   = google_pubsub_topic.dead_letter.name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${local.pubsub_agent}"
}

# Status messages: stage at the end of every run; the upstream poll (tick or webhook) when a watched
# repo is gated for the pipeline's token; reconcile for stuck workloads and repaired runs. A
# request's own `notify` topic needs the same grant.
resource "google_pubsub_topic_iam_member" "status_publisher" {
  for_each = toset(["stage", "upstream-poll", "upstream-webhook", "reconcile"])

  project = var.project_id
  topic   = google_pubsub_topic.status.name
  role    = "roles/pubsub.publisher"
  member  = local.sa_member[each.key]

  depends_on = [google_service_account.fn]
}

# Eventarc's Cloud Storage triggers: the Cloud Storage service agent publishes the bucket's
# notifications to the trigger's transport topic.
resource "google_project_iam_member" "gcs_agent_publisher" {
  project = var.project_id
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${local.gcs_agent}"
}
