output "requests_bucket" {
  description = "Drop request files under gs://<this>/requests/."
  value       = google_storage_bucket.requests.name
}

output "artifacts_bucket" {
  description = "What workloads write: conversion cache attempts, checkpoints, exported models (RLPIPE_ARTIFACTS_BUCKET)."
  value       = google_storage_bucket.artifacts.name
}

output "state_bucket" {
  description = "The control plane's records: ledgers, events, error records, READY.json, upstream state, reconcile cursor (RLPIPE_STATE_BUCKET)."
  value       = google_storage_bucket.state.name
}

output "source_bucket" {
  description = "Holds the functions' source archives."
  value       = google_storage_bucket.source.name
}

output "topics" {
  description = "Pub/Sub topics by role."
  value = {
    requests       = google_pubsub_topic.requests.name
    status         = google_pubsub_topic.status.name
    upstream_tick  = google_pubsub_topic.upstream_tick.name
    reconcile_tick = google_pubsub_topic.reconcile_tick.name
    dead_letter    = google_pubsub_topic.dead_letter.name
  }
}

output "dead_letter_subscription" {
  description = "Pull subscription holding events that could not be delivered."
  value       = google_pubsub_subscription.dead_letter.name
}

output "workflow_name" {
  description = "The pipeline workflow (RLPIPE_WORKFLOW)."
  value       = google_workflows_workflow.pipeline.name
}

output "function_urls" {
  description = "URL of every function (only stage and upstream_webhook are called over HTTP)."
  value       = { for k, f in google_cloudfunctions2_function.fn : k => f.service_config[0].uri }
}

output "stage_url" {
  description = "RLPIPE_STAGE_URL (the workflow has it; the CLI's cancel needs it too)."
  value       = google_cloudfunctions2_function.fn["stage"].service_config[0].uri
}

output "webhook_url" {
  description = "Register this as the Hugging Face webhook URL, with the webhook secret."
  value       = google_cloudfunctions2_function.fn["upstream-webhook"].service_config[0].uri
}

output "service_accounts" {
  description = "Email of every service account Terraform created."
  value = merge(
    { for k, sa in google_service_account.fn : k => sa.email },
    {
      workflow = google_service_account.workflow.email
      eventarc = google_service_account.eventarc.email
      build    = google_service_account.build.email
      workload = google_service_account.workload.email
      operator = google_service_account.operator.email
    },
  )
}

output "secrets" {
  description = "Secret Manager secrets to fill with `gcloud secrets versions add`."
  value = {
    hf_token       = google_secret_manager_secret.hf_token.secret_id
    webhook_secret = google_secret_manager_secret.webhook_secret.secret_id
  }
}

output "k8s_params_env" {
  description = "params.env for infra/cluster/k8s: terraform output -raw k8s_params_env > infra/cluster/k8s/params.env"
  value = join("\n", [
    "WORKLOAD_GSA=${google_service_account.workload.email}",
    "STAGE_GSA=${google_service_account.fn["stage"].email}",
    "RECONCILE_GSA=${google_service_account.fn["reconcile"].email}",
    "HF_TOKEN_SECRET_VERSION=${google_secret_manager_secret.hf_token.id}/versions/latest",
    "TPU_CHIPS=${var.kueue_tpu_chips}",
    "CPU_NP_CPU=${var.kueue_cpu_np_cpu}",
    "CPU_NP_MEMORY=${var.kueue_cpu_np_memory}",
    "CPU_NP_EPHEMERAL_STORAGE=${var.kueue_cpu_np_ephemeral_storage}",
    "",
  ])
}

output "cli_env" {
  description = "Environment for the rlpipe CLI against this deployment: eval \"$(terraform output -raw cli_env)\""
  value = join("\n", concat(
    ["export RLPIPE_TARGET=gcp"],
    [for k, v in local.function_env : "export ${k}='${v}'" if !contains(["RLPIPE_GKE_CA_CERT", "RLPIPE_GKE_ENDPOINT"], k)],
    ["export RLPIPE_STAGE_URL='${google_cloudfunctions2_function.fn["stage"].service_config[0].uri}'"],
    # The CLI's ID token for stage (rlpipe cancel): user credentials impersonate this account.
    ["export RLPIPE_IMPERSONATE_SERVICE_ACCOUNT='${google_service_account.operator.email}'", ""],
  ))
}

output "team_cli_env" {
  description = "Per team (var.teams), the CLI's environment for that team's operators: as cli_env, but the ID token for the stage function is the team's operator service account's, the only identity the stage function lets cancel, retry and promote the team's runs: eval \"$(terraform output -json team_cli_env | jq -r .vision)\""
  value = {
    for team in keys(var.teams) : team => join("\n", concat(
      ["export RLPIPE_TARGET=gcp"],
      [for k, v in local.function_env : "export ${k}='${v}'" if !contains(["RLPIPE_GKE_CA_CERT", "RLPIPE_GKE_ENDPOINT"], k)],
      ["export RLPIPE_STAGE_URL='${google_cloudfunctions2_function.fn["stage"].service_config[0].uri}'"],
      ["export RLPIPE_IMPERSONATE_SERVICE_ACCOUNT='${google_service_account.team_operator[team].email}'", ""],
    ))
  }
}
