// Batch approval from the inbox: the drafts ticked are written out by the server as one
// statement (each draft's revision and params digest, and the totals), shown here item by
// item with what they add up to, signed once with this browser's key, and recorded all or
// nothing. The browser refuses a statement that names other drafts than those ticked, or
// whose totals are not what the drafts shown add up to, before anything is signed.

import { postJson, showProblem, signAndPost } from "./keys.js";

let offer = null;

function element(id) {
  return document.getElementById(id);
}

function status(text) {
  element("batch-status").textContent = text;
}

function picked() {
  return [...document.querySelectorAll("#inbox-rows input.pick:checked")].map((box) => box.value);
}

function addedUp(items) {
  const totals = new Map();
  for (const item of items) {
    if (item.amount) {
      totals.set(item.amount.currency, (totals.get(item.amount.currency) ?? 0) + item.amount.amount_minor);
    }
  }
  return totals;
}

function problemWith(offered, draftIds) {
  const named = offered.statement.items.map((item) => item.draft_id);
  if (JSON.stringify(named) !== JSON.stringify(draftIds)) {
    return "the server's batch names other drafts than those you ticked";
  }
  const shown = addedUp(offered.items);
  const signed = offered.statement.totals;
  const same =
    signed.length === shown.size && signed.every((t) => shown.get(t.currency) === t.amount_minor);
  return same ? null : "the batch's totals are not what the drafts shown add up to";
}

async function review() {
  offer = null;
  element("batch-offer").hidden = true;
  const draftIds = picked();
  if (draftIds.length < 1) {
    status("tick the drafts to approve together first");
    return;
  }
  status("asking for the batch statement…");
  try {
    const offered = await postJson("/console/approvals/batch/statement", { draft_ids: draftIds });
    const problem = problemWith(offered, draftIds);
    if (problem) {
      status(`not signed: ${problem}`);
      return;
    }
    const list = element("batch-items");
    list.replaceChildren(
      ...offered.items.map((item) => {
        const line = document.createElement("li");
        line.dataset.draftId = item.draft_id;
        line.textContent = `${item.summary} (revision ${item.revision}${item.amount ? `, ${item.amount.display}` : ""})`;
        return line;
      }),
    );
    // Oversight: each draft of the batch is in front of the approver now (its summary).
    for (const item of offered.items) {
      const url = `/console/drafts/${encodeURIComponent(item.draft_id)}/views`;
      postJson(url, { revision: item.revision, seen: [] }).catch(() => {});
    }
    element("batch-totals").textContent =
      offered.totals.map((total) => total.display).join(", ") || "no amount";
    offer = offered;
    element("batch-offer").hidden = false;
    status("");
  } catch (error) {
    showProblem(element("batch-status"), error);
  }
}

async function sign() {
  if (!offer) {
    return;
  }
  element("batch-sign").disabled = true;
  status("sending your signed batch…");
  try {
    const result = await signAndPost("/console/approvals/batch", offer.statement);
    if (result === null) {
      status("no signing key in this browser: import or generate one first (Keys & passkeys)");
      return;
    }
    const approved = result.drafts.filter((draft) => draft.status === "approved").length;
    status(`signed: ${result.drafts.length} drafts, ${approved} approved`);
    element("batch-offer").hidden = true;
    document.body.dataset.batch = result.batch_id;
  } catch (error) {
    showProblem(element("batch-status"), error);
  } finally {
    element("batch-sign").disabled = false;
    offer = null;
  }
}

element("batch-review").addEventListener("click", review);
element("batch-sign").addEventListener("click", sign);
