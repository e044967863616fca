# Secrets exist here; their values never do. Add them with gcloud (docs/deploy.md):
#   printf '%s' "$HF_TOKEN" | gcloud secrets versions add <prefix>-hf-token --data-file=-
# so no secret value is ever in a .tf file, a plan or the Terraform state.

resource "google_secret_manager_secret" "hf_token" {
  project   = var.project_id
  secret_id = "${var.name_prefix}-hf-token"

  replication {
    auto {}
  }

  depends_on = [google_project_service.apis]
}

resource "google_secret_manager_secret" "webhook_secret" {
  project   = var.project_id
  secret_id = "${var.name_prefix}-webhook-secret"

  replication {
    auto {}
  }

  depends_on = [google_project_service.apis]
}

locals {
  secret_accessors = {
    "hf-token/stage"            = { secret = google_secret_manager_secret.hf_token.secret_id, member = local.sa_member["stage"] }
    "hf-token/upstream-poll"    = { secret = google_secret_manager_secret.hf_token.secret_id, member = local.sa_member["upstream-poll"] }
    "hf-token/upstream-webhook" = { secret = google_secret_manager_secret.hf_token.secret_id, member = local.sa_member["upstream-webhook"] }
    "webhook/upstream-webhook"  = { secret = google_secret_manager_secret.webhook_secret.secret_id, member = local.sa_member["upstream-webhook"] }
  }
}

# A team's own Hub token (var.teams[*].hf_token_secret), readable by the stage function alone.
locals {
  team_hub_tokens = {
    for team, t in var.teams : "RLPIPE_HF_TOKEN_${upper(replace(team, "-", "_"))}" => t.hf_token_secret
    if t.hf_token_secret != null
  }
}

resource "google_secret_manager_secret_iam_member" "team_hub_token" {
  for_each = local.team_hub_tokens

  project   = var.project_id
  secret_id = each.value
  role      = "roles/secretmanager.secretAccessor"
  member    = local.sa_member["stage"]

  depends_on = [google_service_account.fn]
}

resource "google_secret_manager_secret_iam_member" "accessor" {
  for_each = local.secret_accessors

  project   = var.project_id
  secret_id = each.value.secret
  role      = "roles/secretmanager.secretAccessor"
  member    = each.value.member

  depends_on = [google_service_account.fn]
}

# GKE's secret synchronisation reads the token as the rlpipe-secret-sync Kubernetes ServiceAccount
# (a Workload Identity Federation principal; infra/cluster/k8s/secretsync.yaml).
resource "google_secret_manager_secret_iam_member" "hf_token_secret_sync" {
  project   = var.project_id
  secret_id = google_secret_manager_secret.hf_token.secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = local.secret_sync_ksa
}
