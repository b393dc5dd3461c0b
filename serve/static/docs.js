// The interactive API docs, from Swagger UI's files served by wetqa itself (no CDN): a separate
// script because the Content-Security-Policy allows no inline script.
window.addEventListener("load", () => {
  window.ui = SwaggerUIBundle({ url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true });
});
