"""A four-tool CRM chat driven by the official `openai` SDK: the newcomer's path end to end.

`app` declares the tools (tenant-scoped reads, a confirmed write) over the CRM of
`crm`; `chat` is the console program that talks to any OpenAI-compatible server.
"""
