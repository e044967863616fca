# Service accounts and what each may do. No account gets a basic role (owner/editor/viewer) or an
# *admin role at project level; grants sit on the narrowest resource that takes them.

resource "google_service_account" "fn" {
  for_each = local.functions

  project      = var.project_id
  account_id   = local.sa_ids[each.key]
  display_name = "rlpipe function ${each.key}"
  description  = "Runtime identity of the ${each.value.entry_point} function."

  depends_on = [google_project_service.apis]
}

resource "google_service_account" "workflow" {
  project      = var.project_id
  account_id   = local.sa_ids["workflow"]
  display_name = "rlpipe workflow"
  description  = "Identity of the pipeline workflow: invokes the stage function, nothing else."

  depends_on = [google_project_service.apis]
}

resource "google_service_account" "eventarc" {
  project      = var.project_id
  account_id   = local.sa_ids["eventarc"]
  display_name = "rlpipe Eventarc triggers"
  description  = "Identity Eventarc uses to deliver events to the event-driven functions."

  depends_on = [google_project_service.apis]
}

resource "google_service_account" "build" {
  project      = var.project_id
  account_id   = local.sa_ids["build"]
  display_name = "rlpipe function builds"
  description  = "Cloud Build identity that builds the functions' containers."

  depends_on = [google_project_service.apis]
}

resource "google_service_account" "operator" {
  project      = var.project_id
  account_id   = local.sa_ids["operator"]
  display_name = "rlpipe operators' CLI"
  description  = "Impersonated by var.operators for an ID token to the stage function (rlpipe cancel); may invoke stage, nothing else."

  depends_on = [google_project_service.apis]
}

resource "google_service_account" "workload" {
  project      = var.project_id
  account_id   = local.sa_ids["workload"]
  display_name = "rlpipe workloads"
  description  = "Identity of the conversion, training and export pods (Workload Identity from ${var.k8s_namespace}/${var.k8s_workload_service_account})."

  depends_on = [google_project_service.apis]
}

# ------------------------------------------------------------------------------ project-level roles
#
# Only roles that exist at project level alone: starting/cancelling executions and sending
# callbacks (Workflows has no per-workflow IAM), authenticating to GKE (RBAC in
# infra/cluster/k8s/rbac.yaml then limits the stage and reconcile accounts to the rlpipe
# namespace and to the calls rlpipe.cluster makes; roles/container.developer would instead give
# read/write on every object, Secrets included, in every namespace), receiving events, logging,
# building.

locals {
  project_roles = {
    "intake-object/workflows"    = { member = local.sa_member["intake-object"], role = "roles/workflows.invoker" }
    "intake-message/workflows"   = { member = local.sa_member["intake-message"], role = "roles/workflows.invoker" }
    "artifact-event/workflows"   = { member = local.sa_member["artifact-event"], role = "roles/workflows.invoker" }
    "upstream-poll/workflows"    = { member = local.sa_member["upstream-poll"], role = "roles/workflows.invoker" }
    "upstream-webhook/workflows" = { member = local.sa_member["upstream-webhook"], role = "roles/workflows.invoker" }
    "reconcile/workflows"        = { member = local.sa_member["reconcile"], role = "roles/workflows.invoker" }
    "stage/gke"                  = { member = local.sa_member["stage"], role = "roles/container.clusterViewer" }
    "stage/logs"                 = { member = local.sa_member["stage"], role = "roles/logging.viewer" } # a gone head pod's evaluation lines (control/cloud_logs.py)
    "reconcile/gke"              = { member = local.sa_member["reconcile"], role = "roles/container.clusterViewer" }
    "workflow/logging"           = { member = local.sa_member["workflow"], role = "roles/logging.logWriter" }
    "eventarc/receiver"          = { member = local.sa_member["eventarc"], role = "roles/eventarc.eventReceiver" }
    "build/builder"              = { member = local.sa_member["build"], role = "roles/cloudbuild.builds.builder" }
  }
}

resource "google_project_iam_member" "project" {
  for_each = local.project_roles

  project = var.project_id
  role    = each.value.role
  member  = each.value.member

  depends_on = [
    google_service_account.fn,
    google_service_account.workflow,
    google_service_account.eventarc,
    google_service_account.build,
    time_sleep.api_propagation, # the functions depend on these grants: the first apply waits here
  ]
}

# ------------------------------------------------------------------------------ buckets
#
# Every grant on the artifacts and state buckets is limited by an IAM condition to the object
# name prefixes its identity needs (resource.name), and listings to those prefixes
# (storage.googleapis.com/objectListPrefix). core/layout.py names which object lives where:
#
#   state bucket      runs/<id>/run.json, events/, error.json    intake, artifact_event (read), stage, reconcile, upstream
#                     cache/maxtext/<key>/READY.json              stage (it checks the commit marker, then names the winner)
#                     upstream/<repo>/state.json                  upstream poll and webhook
#                     reconcile/cursor.json                       reconcile
#                     teams/<team>/usage.json                     stage (a team's places and chip-hours: core/team_limits.py)
#   artifacts bucket  runs/<id>/trained/, runs/<id>/hf/           workloads write; stage and reconcile read
#                     cache/maxtext/<key>/<run>-a<N>/             workloads write; stage reads
#                     teams/<team>/runs/…, teams/<team>/cache/…   the same for a team's runs (core/layout.py
#                                                                 team_prefix): its operators read them
#                     pathways/                                   workloads (Pathways scratch)
#                     runs/<id>/inputs/<role>.<ext>               intake writes a request's own files once;
#                                                                 the head reads them and stages data/ beside
#
# The workload identity has no grant at all on the state bucket: a training container cannot
# rewrite a ledger, point a conversion cache key at a checkpoint of its own or forge an upstream
# decision.

locals {
  # "<prefix>" → the condition clause allowing the objects under it and listings of it.
  state_prefix = {
    for p in ["runs/", "cache/maxtext/", "upstream/", "reconcile/", "teams/"] :
    p => "resource.name.startsWith(\"${local.state_condition}${p}\") || api.getAttribute(\"storage.googleapis.com/objectListPrefix\", \"\").startsWith(\"${p}\")"
  }
  artifacts_prefix = {
    for p in ["runs/", "cache/maxtext/", "pathways/", "teams/"] :
    p => "resource.name.startsWith(\"${local.storage_condition}${p}\") || api.getAttribute(\"storage.googleapis.com/objectListPrefix\", \"\").startsWith(\"${p}\")"
  }

  state_grants = {
    "intake-object"    = { member = local.sa_member["intake-object"], role = "roles/storage.objectUser", condition = local.state_prefix["runs/"] }
    "intake-message"   = { member = local.sa_member["intake-message"], role = "roles/storage.objectUser", condition = local.state_prefix["runs/"] }
    "artifact-event"   = { member = local.sa_member["artifact-event"], role = "roles/storage.objectViewer", condition = local.state_prefix["runs/"] }
    "stage"            = { member = local.sa_member["stage"], role = "roles/storage.objectUser", condition = "${local.state_prefix["runs/"]} || ${local.state_prefix["cache/maxtext/"]} || ${local.state_prefix["teams/"]}" }
    "reconcile"        = { member = local.sa_member["reconcile"], role = "roles/storage.objectUser", condition = "${local.state_prefix["runs/"]} || ${local.state_prefix["reconcile/"]}" }
    "upstream-poll"    = { member = local.sa_member["upstream-poll"], role = "roles/storage.objectUser", condition = "${local.state_prefix["runs/"]} || ${local.state_prefix["upstream/"]}" }
    "upstream-webhook" = { member = local.sa_member["upstream-webhook"], role = "roles/storage.objectUser", condition = "${local.state_prefix["runs/"]} || ${local.state_prefix["upstream/"]}" }
  }

  artifact_grants = {
    # stage reads every stage's output to decide completeness (and where training resumes).
    "stage" = { member = local.sa_member["stage"], role = "roles/storage.objectViewer", condition = "${local.artifacts_prefix["runs/"]} || ${local.artifacts_prefix["cache/maxtext/"]} || ${local.artifacts_prefix["teams/"]}" }
    # reconcile reads a finished run's export (runs/<id>/hf/) before it calls the run succeeded.
    "reconcile" = { member = local.sa_member["reconcile"], role = "roles/storage.objectViewer", condition = "${local.artifacts_prefix["runs/"]} || ${local.artifacts_prefix["teams/"]}" }
    # The pods write conversion attempts, checkpoints, exports and Pathways scratch: only there.
    "workload"        = { member = local.sa_member["workload"], role = "roles/storage.objectUser", condition = "${local.artifacts_prefix["runs/"]} || ${local.artifacts_prefix["cache/maxtext/"]} || ${local.artifacts_prefix["pathways/"]} || ${local.artifacts_prefix["teams/"]}" }
    "workload/bucket" = { member = local.sa_member["workload"], role = "roles/storage.bucketViewer", condition = "" }
    # intake copies a request's own files (reward functions, processor, chat template) into the
    # run's inputs/ and reads a copy back when a redelivery finds one: those objects only.
    "intake-object"  = { member = local.sa_member["intake-object"], role = "roles/storage.objectUser", condition = local.intake_inputs }
    "intake-message" = { member = local.sa_member["intake-message"], role = "roles/storage.objectUser", condition = local.intake_inputs }
  }
  intake_inputs = "resource.name.matches(\"^${local.storage_condition}(teams/[a-z0-9-]+/)?runs/[a-z0-9]+/inputs/[a-z_]+[.](py|json)$\")"
}

resource "google_storage_bucket_iam_member" "artifacts" {
  for_each = local.artifact_grants

  bucket = google_storage_bucket.artifacts.name
  role   = each.value.role
  member = each.value.member

  dynamic "condition" {
    for_each = each.value.condition == "" ? [] : [each.value.condition]
    content {
      title       = "rlpipe-${replace(each.key, "/", "-")}-prefixes"
      description = "Only the objects (and listings) this identity needs."
      expression  = condition.value
    }
  }

  depends_on = [google_service_account.fn, google_service_account.workload]
}

resource "google_storage_bucket_iam_member" "state" {
  for_each = local.state_grants

  bucket = google_storage_bucket.state.name
  role   = each.value.role
  member = each.value.member

  condition {
    title       = "rlpipe-${each.key}-state-prefixes"
    description = "Only the control-plane records (and listings) this function needs."
    expression  = each.value.condition
  }

  depends_on = [google_service_account.fn]
}

# The requests bucket: intake reads request files (requests/), the upstream poll (tick or webhook)
# reads the watch list (config/watch.yaml). Nothing in the pipeline writes there.
locals {
  requests_object = "projects/_/buckets/${local.requests_bucket}/objects/"
  requests_grants = {
    "intake-object"    = "resource.name.startsWith(\"${local.requests_object}requests/\")"
    "upstream-poll"    = "resource.name.startsWith(\"${local.requests_object}config/\")"
    "upstream-webhook" = "resource.name.startsWith(\"${local.requests_object}config/\")"
  }
}

resource "google_storage_bucket_iam_member" "requests" {
  for_each = local.requests_grants

  bucket = google_storage_bucket.requests.name
  role   = "roles/storage.objectViewer"
  member = local.sa_member[each.key]

  condition {
    title       = "rlpipe-${each.key}-prefixes"
    description = "Only the objects this function reads."
    expression  = each.value
  }

  depends_on = [google_service_account.fn]
}

# Team namespaces: each member may create objects only under its own folder of requests/, so a
# request_id names a run only within the team that owns the folder (core/layout.request_namespace).
locals {
  namespace_grants = merge([
    for ns, members in var.request_namespaces : { for m in members : "${ns}/${m}" => { ns = ns, member = m } }
  ]...)
}

resource "google_storage_bucket_iam_member" "request_namespaces" {
  for_each = local.namespace_grants

  bucket = google_storage_bucket.requests.name
  role   = "roles/storage.objectCreator"
  member = each.value.member

  condition {
    title       = "rlpipe-namespace-${each.value.ns}"
    description = "Requests under requests/${each.value.ns}/ only."
    expression  = "resource.name.startsWith(\"${local.requests_object}requests/${each.value.ns}/\")"
  }
}

resource "google_storage_bucket_iam_member" "source_build" {
  bucket = google_storage_bucket.source.name
  role   = "roles/storage.objectViewer"
  member = local.sa_member["build"]

  depends_on = [google_service_account.build]
}

# ------------------------------------------------------------------------------ identities

# The workload pods' Kubernetes ServiceAccount acts as the workload Google service account.
resource "google_service_account_iam_member" "workload_identity" {
  service_account_id = google_service_account.workload.name
  role               = "roles/iam.workloadIdentityUser"
  member             = local.workload_ksa
}

# Pub/Sub mints the OIDC tokens of push deliveries as the trigger identity.
resource "google_service_account_iam_member" "pubsub_token_creator" {
  service_account_id = google_service_account.eventarc.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = "serviceAccount:${local.pubsub_agent}"
}

# ------------------------------------------------------------------------------ operators
#
# What the CLI needs, per command (docs/deploy.md §7): submit = objectCreator on the requests bucket
# (or publisher on the requests topic for --via pubsub); status/list/watch = objectViewer on the
# state bucket (ledgers), and on the artifacts bucket to download what runs produced; cancel = workflows.executions.cancel (roles/workflows.invoker; Workflows
# has no per-workflow IAM) and an ID token for the stage function; retry and promote = that ID token
# only (the stage function writes the ledger; operators never get write on the state bucket). User credentials cannot mint that
# token, so operators impersonate rlpipe-operator (RLPIPE_IMPERSONATE_SERVICE_ACCOUNT, in cli_env),
# the one identity besides the workflow that may invoke stage.

resource "google_project_iam_member" "operators" {
  for_each = toset(var.operators)

  project = var.project_id
  role    = "roles/workflows.invoker"
  member  = each.value

  depends_on = [time_sleep.api_propagation]
}

resource "google_storage_bucket_iam_member" "operators_requests" {
  for_each = toset(var.operators)

  bucket = google_storage_bucket.requests.name
  role   = "roles/storage.objectCreator"
  member = each.value

  # With teams (var.teams), a folder under requests/ decides a team, so only its submitters may
  # write there: the deployment's operators keep config/ (the watch list) and nothing else.
  dynamic "condition" {
    for_each = length(var.teams) > 0 ? [1] : []
    content {
      title       = "rlpipe-operators-config"
      description = "The watch list and other configuration; requests go through a team's folder."
      expression  = "resource.name.startsWith(\"${local.requests_object}config/\")"
    }
  }
}

resource "google_storage_bucket_iam_member" "operators_artifacts" {
  for_each = toset(var.operators)

  bucket = google_storage_bucket.artifacts.name
  role   = "roles/storage.objectViewer"
  member = each.value
}

resource "google_storage_bucket_iam_member" "operators_state" {
  for_each = toset(var.operators)

  bucket = google_storage_bucket.state.name
  role   = "roles/storage.objectViewer"
  member = each.value
}

resource "google_pubsub_topic_iam_member" "operators_publish" {
  for_each = toset(var.operators)

  project = var.project_id
  topic   = google_pubsub_topic.requests.name
  role    = "roles/pubsub.publisher"
  member  = each.value
}

resource "google_service_account_iam_member" "operators_impersonate" {
  for_each = toset(var.operators)

  service_account_id = google_service_account.operator.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = each.value
}

resource "google_cloud_run_v2_service_iam_member" "operator_invokes_stage" {
  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.fn["stage"].name
  role     = "roles/run.invoker"
  member   = local.sa_member["operator"]

  depends_on = [google_service_account.operator]
}
