# rlpipe on Google Cloud: buckets, topics, secrets, service accounts, the functions with their
# Eventarc triggers, the workflow and the scheduler ticks. The GKE cluster comes from Cluster
# Toolkit (infra/cluster) and is only read here. docs/deploy.md walks through the whole deployment.

data "google_project" "this" {
  project_id = var.project_id
}

data "google_storage_project_service_account" "gcs" {
  project = var.project_id
}

data "google_container_cluster" "gke" {
  project  = var.project_id
  name     = var.gke_cluster_name
  location = var.gke_cluster_location
}

locals {
  project_number = data.google_project.this.number

  requests_bucket  = coalesce(var.requests_bucket_name, "${var.project_id}-${var.name_prefix}-requests")
  artifacts_bucket = coalesce(var.artifacts_bucket_name, "${var.project_id}-${var.name_prefix}-artifacts")
  state_bucket     = coalesce(var.state_bucket_name, "${var.project_id}-${var.name_prefix}-state")
  source_bucket    = "${var.project_id}-${var.name_prefix}-functions-source"
  source_zip       = coalesce(var.source_zip, "${path.module}/../../build/functions-source.zip")

  # Service accounts by role. Their emails follow from the account ids, so IAM grants below name
  # them directly (and depend on the accounts explicitly); static tools can then read every grant.
  sa_ids = merge(
    { for k in keys(local.functions) : k => "${var.name_prefix}-${k}" },
    {
      workflow = "${var.name_prefix}-workflow"
      eventarc = "${var.name_prefix}-eventarc"
      build    = "${var.name_prefix}-build"
      workload = "${var.name_prefix}-workload"
      operator = "${var.name_prefix}-operator"
    },
  )
  sa_email  = { for k, id in local.sa_ids : k => "${id}@${var.project_id}.iam.gserviceaccount.com" }
  sa_member = { for k, email in local.sa_email : k => "serviceAccount:${email}" }

  # Google-managed service agents.
  pubsub_agent = "service-${local.project_number}@gcp-sa-pubsub.iam.gserviceaccount.com"
  gcs_agent    = data.google_storage_project_service_account.gcs.email_address

  # Workload Identity principals.
  workload_pool    = "${var.project_id}.svc.id.goog"
  workload_ksa     = "serviceAccount:${local.workload_pool}[${var.k8s_namespace}/${var.k8s_workload_service_account}]"
  secret_sync_ksa  = "principal://iam.googleapis.com/projects/${local.project_number}/locations/global/workloadIdentityPools/${local.workload_pool}/subject/ns/${var.k8s_namespace}/sa/${var.k8s_secret_sync_service_account}"
  gke_dns_endpoint = try(data.google_container_cluster.gke.control_plane_endpoints_config[0].dns_endpoint_config[0].endpoint, "")
  gke_endpoint     = var.gke_use_dns_endpoint ? local.gke_dns_endpoint : data.google_container_cluster.gke.endpoint
  gke_ca_cert      = var.gke_use_dns_endpoint ? "" : data.google_container_cluster.gke.master_auth[0].cluster_ca_certificate
  # IAM conditions name objects as projects/_/buckets/<bucket>/objects/<name> (iam.tf).
  storage_condition = "projects/_/buckets/${local.artifacts_bucket}/objects/"
  state_condition   = "projects/_/buckets/${local.state_bucket}/objects/"
}

resource "google_project_service" "apis" {
  for_each = var.enable_apis ? toset([
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudscheduler.googleapis.com",
    "container.googleapis.com",
    "eventarc.googleapis.com",
    "iam.googleapis.com",
    "logging.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
    "storage.googleapis.com",
    "workflowexecutions.googleapis.com",
    "workflows.googleapis.com",
  ]) : toset([])

  project            = var.project_id
  service            = each.value
  disable_on_destroy = false
}

# The first apply on a fresh project: enabling eventarc.googleapis.com creates the Eventarc service
# agent, whose permissions take minutes to spread; a trigger created before that fails with "Permission
# denied while using the Eventarc Service Agent. If you recently started to use Eventarc, it may take
# a few minutes before all necessary permissions are propagated to the Service Agent" (open upstream:
# hashicorp/terraform-provider-google#25294, "Functions v2 Eventarc trigger errors on first apply on
# fresh project"; also #14584). Everything that leads to the functions and their triggers waits for
# this sleep (iam.tf: the project grants the functions depend on). It runs once, when created; a
# later apply does not wait again.
resource "time_sleep" "api_propagation" {
  create_duration = var.enable_apis ? var.api_propagation_wait : "0s"

  triggers = {
    apis = join(",", sort(keys(google_project_service.apis)))
  }

  depends_on = [google_project_service.apis]
}
