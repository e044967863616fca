# Teams (var.teams; docs/teams.md): where each team's requests arrive, who may put them there, and
# the identity its operators act as. The source decides a request's team (rlpipe.core.teams), so the
# IAM here is what keeps one team out of another's: a folder only its submitters may write, a topic
# only they may publish on, and an operator identity only its operators may take.

locals {
  team_members = {
    submit = merge([for team, t in var.teams : { for m in t.submitters : "${team}/${m}" => { team = team, member = m } }]...)
    # Groups and people impersonate the team's operator service account for an ID token to stage.
    operate = merge([for team, t in var.teams : { for m in t.operators : "${team}/${m}" => { team = team, member = m } }]...)
  }

  # What the functions read as RLPIPE_TEAMS: the declaration, with each team's topic, and among its
  # operators its own service account (the identity the stage function sees when they impersonate
  # it) beside the people and service accounts listed by e-mail (a group cannot be checked there).
  teams_declaration = {
    for team, t in var.teams : team => merge(t, {
      topic = "${var.name_prefix}-requests-${team}"
      operators = concat(
        ["serviceAccount:${google_service_account.team_operator[team].email}"],
        [for m in t.operators : m if !startswith(m, "group:")],
      )
    })
  }
}

resource "google_pubsub_topic" "team_requests" {
  #checkov:skip=CKV_GCP_83:Google-managed encryption; messages are requests (no secrets), as on the deployment's requests topic.
  for_each = var.teams

  lifecycle {
    precondition {
      condition     = length(setintersection(keys(var.teams), keys(var.request_namespaces))) == 0
      error_message = "A request namespace (var.request_namespaces) may not have a team's name: its members could write into the team's folder. Declare them as the team's submitters instead."
    }
  }

  project = var.project_id
  name    = "${var.name_prefix}-requests-${each.key}"
  labels  = { rlpipe-team = each.key }

  depends_on = [google_project_service.apis]
}

resource "google_pubsub_topic_iam_member" "team_publishers" {
  for_each = local.team_members.submit

  project = var.project_id
  topic   = google_pubsub_topic.team_requests[each.value.team].name
  role    = "roles/pubsub.publisher"
  member  = each.value.member
}

resource "google_storage_bucket_iam_member" "team_submitters" {
  for_each = local.team_members.submit

  bucket = google_storage_bucket.requests.name
  role   = "roles/storage.objectCreator"
  member = each.value.member

  condition {
    title       = "rlpipe-team-${each.value.team}"
    description = "Requests under requests/${each.value.team}/ only: the folder decides the team."
    expression  = "resource.name.startsWith(\"${local.requests_object}requests/${each.value.team}/\")"
  }
}

# Each team's topic delivers to the one intake-message function, through its own Eventarc trigger
# (a function has one trigger of its own; more are Eventarc triggers on its Cloud Run service).
resource "google_eventarc_trigger" "team_requests" {
  for_each = var.teams

  project         = var.project_id
  location        = var.region
  name            = "${var.name_prefix}-requests-${each.key}"
  service_account = google_service_account.eventarc.email
  labels          = { rlpipe-team = each.key }

  matching_criteria {
    attribute = "type"
    value     = local.pubsub_published
  }

  destination {
    cloud_run_service {
      # The function's Cloud Run service has the function's name (a bare name, as Eventarc takes it).
      service = google_cloudfunctions2_function.fn["intake-message"].name
      region  = var.region
    }
  }

  transport {
    pubsub {
      topic = google_pubsub_topic.team_requests[each.key].id
    }
  }
}

resource "google_service_account" "team_operator" {
  for_each = var.teams

  project      = var.project_id
  account_id   = "${var.name_prefix}-op-${each.key}"
  display_name = "rlpipe operators of team ${each.key}"
  description  = "Impersonated by team ${each.key}'s operators for an ID token to the stage function: the identity it lets cancel, retry and promote the team's runs."
}

resource "google_service_account_iam_member" "team_operators_impersonate" {
  for_each = local.team_members.operate

  service_account_id = google_service_account.team_operator[each.value.team].name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = each.value.member
}

resource "google_cloud_run_v2_service_iam_member" "team_operator_invokes_stage" {
  for_each = var.teams

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.fn["stage"].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.team_operator[each.key].email}"
}

# A team's workloads run in its own namespace (rlpipe-<team>, rendered by `rlpipe teams render`):
# its rlpipe-workload ServiceAccount acts as the workload Google service account, and its
# rlpipe-secret-sync ServiceAccount reads the token the namespace syncs, as namespace rlpipe's do.
resource "google_service_account_iam_member" "team_workload_identity" {
  for_each = var.teams

  service_account_id = google_service_account.workload.name
  role               = "roles/iam.workloadIdentityUser"
  member             = "serviceAccount:${local.workload_pool}[rlpipe-${each.key}/${var.k8s_workload_service_account}]"
}

resource "google_secret_manager_secret_iam_member" "team_hf_token_secret_sync" {
  for_each = var.teams

  project   = var.project_id
  secret_id = google_secret_manager_secret.hf_token.secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "principal://iam.googleapis.com/projects/${local.project_number}/locations/global/workloadIdentityPools/${local.workload_pool}/subject/ns/rlpipe-${each.key}/sa/${var.k8s_secret_sync_service_account}"
}

# What a team's operators need besides the stage function: to read the ledgers (rlpipe status, list,
# watch: the state bucket, shared by every team, see docs/teams.md) and what their team's runs wrote
# (rlpipe logs, report: teams/<team>/ of the artifacts bucket, core/layout.py team_prefix, and no
# other team's data, code, checkpoints or exports), and to cancel executions (Workflows has no
# per-workflow IAM: the CLI asks the stage function first whether the run is their team's).
resource "google_storage_bucket_iam_member" "team_operators_read" {
  for_each = merge([for key, m in local.team_members.operate : {
    "${key}/state" = { bucket = google_storage_bucket.state.name, member = m.member, prefix = "" }
    "${key}/artifacts" = {
      bucket = google_storage_bucket.artifacts.name, member = m.member, prefix = "teams/${m.team}/"
    }
  }]...)

  bucket = each.value.bucket
  role   = "roles/storage.objectViewer"
  member = each.value.member

  dynamic "condition" {
    for_each = each.value.prefix == "" ? [] : [each.value.prefix]
    content {
      title       = "rlpipe-team-${replace(condition.value, "/", "-")}read"
      description = "Only the team's own runs and conversions."
      expression  = "resource.name.startsWith(\"${local.storage_condition}${condition.value}\") || api.getAttribute(\"storage.googleapis.com/objectListPrefix\", \"\").startsWith(\"${condition.value}\")"
    }
  }
}

resource "google_project_iam_member" "team_operators_cancel" {
  for_each = toset([for m in values(local.team_members.operate) : m.member])

  project = var.project_id
  role    = "roles/workflows.invoker"
  member  = each.value

  depends_on = [time_sleep.api_propagation]
}
