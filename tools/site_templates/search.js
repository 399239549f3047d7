// The index's search box: every word typed must appear in a page's text (case-insensitive).
function snippet(text, word) {
  const at = text.toLowerCase().indexOf(word);
  const start = Math.max(0, at - 60);
  return (start > 0 ? "…" : "") + text.slice(start, at + 100) + "…";
}

function search(query) {
  const words = query.toLowerCase().split(/\s+/).filter((w) => w.length > 0);
  if (words.length === 0) return [];
  return PAGES.filter((page) => {
    const text = page.text.toLowerCase() + " " + page.title.toLowerCase();
    return words.every((w) => text.includes(w));
  }).map((page) => ({ page, snippet: snippet(page.text, words[0]) }));
}

function show(query) {
  const list = document.getElementById("results");
  list.replaceChildren();
  const found = search(query);
  if (query.trim() && found.length === 0) {
    const item = document.createElement("li");
    item.textContent = "No notebook mentions that.";
    list.appendChild(item);
  }
  for (const { page, snippet: text } of found) {
    const item = document.createElement("li");
    const link = document.createElement("a");
    link.href = page.file;
    link.textContent = page.title;
    const span = document.createElement("span");
    span.className = "snippet";
    span.textContent = text;
    item.append(link, span);
    list.appendChild(item);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const box = document.getElementById("q");
  box.addEventListener("input", () => show(box.value));
  const start = new URLSearchParams(window.location.search).get("q");
  if (start) { box.value = start; show(start); }
});
