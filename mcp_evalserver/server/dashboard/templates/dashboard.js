// Live parts of a page: an element with data-poll gets its content from that URL again and
// again (server-rendered HTML) until the content says it is no longer live (data-live="0").
for (const element of document.querySelectorAll("[data-poll]")) {
  const tick = async () => {
    let again = true;
    // Someone typing in a filter or holding a fold open keeps the content they are using.
    if (element.contains(document.activeElement) && document.activeElement !== document.body) {
      setTimeout(tick, POLL_MS);
      return;
    }
    try {
      const response = await fetch(element.dataset.poll, { credentials: "same-origin" });
      if (response.status === 401) { window.location.assign("/login"); return; }
      if (response.ok) { element.innerHTML = await response.text(); }
      again = !element.querySelector('[data-live="0"]');
    } catch (error) { /* the server restarts: try again at the next tick */ }
    if (again) { setTimeout(tick, POLL_MS); }
  };
  if (POLL_MS > 0 && !element.querySelector('[data-live="0"]')) { setTimeout(tick, POLL_MS); }
}
// The static report: sort and filter its tables in the page (the live pages ask the server).
for (const table of document.querySelectorAll("table.sortable")) {
  const body = table.tBodies[0];
  for (const button of table.querySelectorAll("th button[data-key]")) {
    button.addEventListener("click", () => {
      const key = button.dataset.key;
      const descending = button.dataset.dir === "asc";
      button.dataset.dir = descending ? "desc" : "asc";
      const value = (row) => {
        const text = row.dataset[key];
        if (text === undefined || text === "") { return null; }
        const number = Number(text);
        return Number.isNaN(number) ? text : number;
      };
      const rows = Array.from(body.rows);
      rows.sort((x, y) => {
        const a = value(x), b = value(y);
        if (a === null) { return b === null ? 0 : 1; }
        if (b === null) { return -1; }
        return (a < b ? -1 : a > b ? 1 : 0) * (descending ? -1 : 1);
      });
      for (const row of rows) { body.appendChild(row); }
    });
  }
}
const taskFilter = document.getElementById("task-filter");
const flakyOnly = document.getElementById("flaky-only");
if (taskFilter && taskFilter.dataset.inPage) {
  const apply = () => {
    const text = taskFilter.value.toLowerCase();
    for (const row of document.querySelectorAll("#task-table tbody tr")) {
      const shown = row.dataset.task.toLowerCase().includes(text)
        && (!flakyOnly.checked || row.dataset.flaky === "1");
      row.hidden = !shown;
    }
  };
  taskFilter.addEventListener("input", apply);
  flakyOnly.addEventListener("change", apply);
}
const collapseAll = document.getElementById("collapse-all");
if (collapseAll) {
  collapseAll.addEventListener("click", (event) => {
    event.preventDefault();
    for (const entry of document.querySelectorAll("details.entry")) { entry.open = false; }
  });
}
