# One 2nd-gen function per entry point of functions/main.py, each with its own trigger and its own
# service account. tests/repo/test_infra.py checks this table against the decorators in main.py.

locals {
  # Cloud Run's deterministic URL of the stage function's service (https://SERVICE-PROJECT_NUMBER.REGION.run.app).
  stage_audience = "https://${var.name_prefix}-stage-${data.google_project.this.number}.${var.region}.run.app"

  storage_finalized = "google.cloud.storage.object.v1.finalized"
  pubsub_published  = "google.cloud.pubsub.topic.v1.messagePublished"

  # Plain values only (no resource references, no nulls), so the table stays readable by static
  # tools; the trigger's bucket or topic is looked up by name in the resource below.
  #   trigger: "storage" (object finalized in `source` bucket), "pubsub" (`source` topic), "http".
  functions = {
    intake-object = {
      entry_point = "intake_object"
      description = "A request file landed in the requests bucket: validate, claim, start the run's execution."
      trigger     = "storage"
      source      = "requests"
      ingress     = "ALLOW_INTERNAL_ONLY"
      memory      = "512Mi"
      timeout     = 120
      max         = 10
      concurrency = 1
      secrets     = {}
    }
    intake-message = {
      entry_point = "intake_message"
      description = "A request document arrived on the requests topic: validate, claim, start the run's execution."
      trigger     = "pubsub"
      source      = "requests"
      ingress     = "ALLOW_INTERNAL_ONLY"
      memory      = "512Mi"
      timeout     = 120
      max         = 10
      concurrency = 1
      secrets     = {}
    }
    artifact-event = {
      entry_point = "artifact_event"
      description = "An object was written in the artifacts bucket: wake the run's workflow on a completion signal."
      trigger     = "storage"
      source      = "artifacts"
      ingress     = "ALLOW_INTERNAL_ONLY"
      memory      = "512Mi"
      timeout     = 60
      max         = 20
      concurrency = 16 # a checkpoint writes thousands of objects; all but a few return without I/O
      secrets     = {}
    }
    stage = {
      entry_point = "stage"
      description = "The workflow's only door into the pipeline: plan, launch, status, finish, cleanup."
      trigger     = "http"
      source      = ""
      ingress     = var.stage_ingress
      memory      = "1Gi"
      timeout     = 60 # <= the workflow's http.post timeout (docs/timeouts.md)
      max         = 10
      concurrency = 1
      secrets     = { RLPIPE_HF_TOKEN = "hf-token" }
    }
    upstream-poll = {
      entry_point = "upstream_poll"
      description = "Upstream tick: detect new Hugging Face releases of watched repos and submit requests."
      trigger     = "pubsub"
      source      = "upstream-tick"
      ingress     = "ALLOW_INTERNAL_ONLY"
      memory      = "512Mi"
      timeout     = 300
      max         = 1
      concurrency = 1
      secrets     = { RLPIPE_HF_TOKEN = "hf-token" }
    }
    upstream-webhook = {
      entry_point = "upstream_webhook"
      description = "Hugging Face webhook (public; X-Webhook-Secret checked by the function): polls the pushed repo now."
      trigger     = "http"
      source      = ""
      ingress     = "ALLOW_ALL"
      memory      = "512Mi"
      timeout     = 60
      max         = 5
      concurrency = 1
      secrets     = { RLPIPE_WEBHOOK_SECRET = "webhook-secret", RLPIPE_HF_TOKEN = "hf-token" }
    }
    reconcile = {
      entry_point = "reconcile"
      description = "Reconcile tick: compare ledgers, executions and cluster objects; cancel and clean up orphans."
      trigger     = "pubsub"
      source      = "reconcile-tick"
      ingress     = "ALLOW_INTERNAL_ONLY"
      memory      = "1Gi"
      timeout     = 540
      max         = 1
      concurrency = 1
      secrets     = {}
    }
  }

  event_functions = { for k, f in local.functions : k => f if f.trigger != "http" }

  # Every RLPIPE_* variable Settings.from_env reads, except those that only the local stack sets
  # (RLPIPE_KUBE_URL, RLPIPE_WORKFLOWS_ENDPOINT, RLPIPE_LOGGING_ENDPOINT, RLPIPE_ID_TOKEN_CERTS_URL,
  # RLPIPE_LOCAL: they switch
  # the code to emulators)
  # and RLPIPE_STAGE_URL (only the workflow calls stage; it gets the URL in user_env_vars).
  function_env = {
    RLPIPE_PROJECT                  = var.project_id
    RLPIPE_LOCATION                 = var.region
    RLPIPE_REQUESTS_BUCKET          = google_storage_bucket.requests.name
    RLPIPE_ARTIFACTS_BUCKET         = google_storage_bucket.artifacts.name
    RLPIPE_STATE_BUCKET             = google_storage_bucket.state.name
    RLPIPE_WORKFLOW                 = var.workflow_name
    RLPIPE_STATUS_TOPIC             = google_pubsub_topic.status.name
    RLPIPE_REQUESTS_TOPIC           = google_pubsub_topic.requests.name
    RLPIPE_GKE_ENDPOINT             = local.gke_endpoint
    RLPIPE_GKE_CA_CERT              = local.gke_ca_cert
    RLPIPE_NAMESPACE                = var.k8s_namespace
    RLPIPE_WORKLOAD_SERVICE_ACCOUNT = var.k8s_workload_service_account
    RLPIPE_START_LEASE_SECONDS      = tostring(var.start_lease_seconds)
    RLPIPE_CALLBACK_TIMEOUT_SECONDS = tostring(var.callback_timeout_seconds)
    RLPIPE_HUB_TIMEOUT_SECONDS      = "10" # one Hub request; plan makes a few, within stage's 60 s
    RLPIPE_ALLOWED_IMAGE_PREFIXES   = join(",", var.allowed_image_prefixes)
    RLPIPE_ALLOWED_ENV              = join(",", var.allowed_env)
    RLPIPE_READ_TOKEN_SECRETS       = join(",", var.read_token_secrets)
    RLPIPE_WRITE_TOKEN_SECRETS      = join(",", var.write_token_secrets)
    RLPIPE_READ_ONLY_GCS_PREFIXES   = join(",", var.read_only_gcs_prefixes)
    RLPIPE_NOTIFY_TOPICS            = join(",", var.notify_topics)
    RLPIPE_ALLOW_USER_CODE          = var.allow_user_code ? "true" : "false"
    RLPIPE_MAX_SWEEP_CHILDREN       = tostring(var.max_sweep_children)
    RLPIPE_ALLOWED_PUBLISH_REPOS    = join(",", var.allowed_publish_repos)
    RLPIPE_ALLOWED_QUEUES           = join(",", var.allowed_queues)
    RLPIPE_ALLOWED_RESERVATIONS     = join(",", var.allowed_reservations)
    RLPIPE_ALLOWED_NODE_POOLS       = join(",", var.allowed_node_pools)
    RLPIPE_ALLOWED_LABEL_PREFIXES   = join(",", var.allowed_label_prefixes)
    RLPIPE_PRICES                   = var.tpu_prices_json
    RLPIPE_TEAMS                    = length(var.teams) > 0 ? jsonencode(local.teams_declaration) : ""
    # The audience a caller's ID token must name (control/adapters/callers.py verifies it, its
    # signature and its expiry, besides Cloud Run's IAM): the stage service's deterministic URL,
    # which the workflow's OIDC auth and the CLI name explicitly (the function cannot be told its
    # own service_config.uri: that would be a cycle).
    RLPIPE_STAGE_AUDIENCE = local.stage_audience
    # The only identity the stage function takes the workflow's operations from (plan, launch,
    # status, gate, select, finish, cleanup; control/identities.py); operators cancel, retry and promote.
    RLPIPE_WORKFLOW_IDENTITY = google_service_account.workflow.email
  }
}

locals {
  trigger_buckets = {
    requests  = google_storage_bucket.requests.name
    artifacts = google_storage_bucket.artifacts.name
  }
  trigger_topics = {
    requests       = google_pubsub_topic.requests.id
    upstream-tick  = google_pubsub_topic.upstream_tick.id
    reconcile-tick = google_pubsub_topic.reconcile_tick.id
  }
  secret_ids = {
    hf-token       = google_secret_manager_secret.hf_token.secret_id
    webhook-secret = google_secret_manager_secret.webhook_secret.secret_id
  }
}

resource "google_cloudfunctions2_function" "fn" {
  #checkov:skip=CKV_GCP_124:Only upstream_webhook (a public webhook that checks X-Webhook-Secret) and stage (var.stage_ingress, IAM-only invokers, so operators can run `rlpipe cancel`) allow external ingress; tests/repo/test_infra.py enforces that every other function is internal-only.
  for_each = local.functions

  project     = var.project_id
  location    = var.region
  name        = "${var.name_prefix}-${each.key}"
  description = each.value.description

  build_config {
    runtime         = var.python_runtime
    entry_point     = each.value.entry_point
    service_account = google_service_account.build.id

    source {
      storage_source {
        bucket = google_storage_bucket.source.name
        object = google_storage_bucket_object.source.name
      }
    }

    automatic_update_policy {}
  }

  service_config {
    service_account_email            = google_service_account.fn[each.key].email
    available_memory                 = each.value.memory
    available_cpu                    = "1"
    timeout_seconds                  = each.value.timeout
    min_instance_count               = 0
    max_instance_count               = lookup(var.function_max_instances, each.key, each.value.max)
    max_instance_request_concurrency = each.value.concurrency
    ingress_settings                 = each.value.ingress
    all_traffic_on_latest_revision   = true
    environment_variables            = local.function_env

    # Each team's own Hub token, for plan (control/adapters/hub_client.py plan_token): stage only.
    dynamic "secret_environment_variables" {
      for_each = each.key == "stage" ? local.team_hub_tokens : {}
      content {
        key        = secret_environment_variables.key
        project_id = var.project_id
        secret     = secret_environment_variables.value
        version    = var.secret_version
      }
    }

    dynamic "secret_environment_variables" {
      for_each = [for env, secret in each.value.secrets : { env = env, secret = secret }]
      content {
        key        = secret_environment_variables.value.env
        project_id = var.project_id
        secret     = local.secret_ids[secret_environment_variables.value.secret]
        version    = var.secret_version
      }
    }
  }

  dynamic "event_trigger" {
    for_each = each.value.trigger == "http" ? [] : [each.value]
    content {
      trigger_region        = var.region
      event_type            = event_trigger.value.trigger == "storage" ? local.storage_finalized : local.pubsub_published
      pubsub_topic          = event_trigger.value.trigger == "pubsub" ? local.trigger_topics[event_trigger.value.source] : null
      retry_policy          = "RETRY_POLICY_RETRY"
      service_account_email = google_service_account.eventarc.email

      dynamic "event_filters" {
        for_each = event_trigger.value.trigger == "storage" ? [local.trigger_buckets[event_trigger.value.source]] : []
        content {
          attribute = "bucket"
          value     = event_filters.value
        }
      }
    }
  }

  depends_on = [
    google_project_iam_member.project,
    google_project_iam_member.gcs_agent_publisher,
    google_secret_manager_secret_iam_member.accessor,
    google_storage_bucket_iam_member.source_build,
  ]
}

# Who may call each function. Event functions: only the Eventarc trigger identity. stage: the
# workflow (and the operators in var.stage_invokers). upstream_webhook: anyone; the function
# itself checks X-Webhook-Secret against the Secret Manager value.
locals {
  invokers = merge(
    { for k, f in local.event_functions : "${k}/eventarc" => { fn = k, member = local.sa_member["eventarc"] } },
    { "stage/workflow" = { fn = "stage", member = local.sa_member["workflow"] } },
    { for m in var.stage_invokers : "stage/${m}" => { fn = "stage", member = m } },
    { "upstream-webhook/public" = { fn = "upstream-webhook", member = "allUsers" } },
  )
}

resource "google_cloud_run_v2_service_iam_member" "invoker" {
  for_each = local.invokers

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.fn[each.value.fn].name
  role     = "roles/run.invoker"
  member   = each.value.member

  depends_on = [google_service_account.eventarc, google_service_account.workflow]
}

# Bounded retries for every trigger: Eventarc's subscription gets the dead-letter topic and the
# retry backoff (the google provider has no field for either on an Eventarc trigger).
resource "terraform_data" "dead_letter" {
  for_each = var.configure_dead_letter ? local.event_functions : {}

  triggers_replace = [
    google_cloudfunctions2_function.fn[each.key].event_trigger[0].trigger,
    google_pubsub_topic.dead_letter.id,
    var.dead_letter_max_delivery_attempts,
    var.event_min_retry_delay,
    var.event_max_retry_delay,
  ]

  provisioner "local-exec" {
    command     = "${path.module}/scripts/eventarc-dead-letter.sh"
    interpreter = ["bash"]
    environment = {
      TRIGGER               = google_cloudfunctions2_function.fn[each.key].event_trigger[0].trigger
      DEAD_LETTER_TOPIC     = google_pubsub_topic.dead_letter.id
      MAX_DELIVERY_ATTEMPTS = tostring(var.dead_letter_max_delivery_attempts)
      MIN_RETRY_DELAY       = var.event_min_retry_delay
      MAX_RETRY_DELAY       = var.event_max_retry_delay
      PUBSUB_SERVICE_AGENT  = local.pubsub_agent
    }
  }

  depends_on = [google_pubsub_topic_iam_member.dead_letter_publisher]
}
